// Package plugins is the plugin SDK: what the author of a coordination
// backend or an inter-broker transport imports, whether the backend is
// built into fibril or shipped as a binary of its own.
//
// A built-in registers a factory from an init function (RegisterCoordination,
// RegisterTransport); the broker calls it with a CoordinationEnv or
// TransportEnv. An external plugin's main calls ServeCoordination or
// ServeTransport with the same factory: the SDK then runs the go-plugin
// handshake and serves the gRPC contract (CoordinationServer,
// TransportServer), turning the backend's errors into statuses the broker
// maps back to the core sentinels, carrying each transport stream's bytes
// in frames over a unix socket, and writing log lines the broker re-emits
// at their own level (HCLog bridges the other way, for hashicorp libraries).
//
// Data flows from the broker's host (package plugins/host), through gRPC,
// into the servers here, and into the backend; answers flow back the same
// way. This package never imports the host: the two agree through
// plugins/pluginpb (the generated contract) and plugins/internal/contract
// (handshake, error mapping, log levels). plugins/plugintest runs a backend
// through the contract inside a test. plugins/README.md is the guide.
package plugins
