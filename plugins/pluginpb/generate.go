// Package pluginpb is the generated gRPC code of the plugin protocol
// (plugin.proto, coordination.proto, transport.proto). Do not edit the
// *.pb.go files; change the .proto files and regenerate.
//
// The generators are pinned to versions that match go.mod (protobuf
// v1.36.12, grpc v1.61: protoc-gen-go-grpc v1.3.0 is the newest that emits
// code grpc v1.61 compiles). Install them outside the module:
//
//	GOBIN=/tmp/protobin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	GOBIN=/tmp/protobin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.3.0
//
// then run `go generate ./plugins/pluginpb` (protoc 3.21 or later on PATH).
package pluginpb

//go:generate env PATH=/tmp/protobin:$PATH protoc --proto_path=. --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative plugin.proto coordination.proto transport.proto
