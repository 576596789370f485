// Package integration holds the multi-process tests of Fibril Go: they
// build cmd/fibril once, run real broker processes on 127.0.0.1 only and
// drive them with core/client and with raw core/wire frames. Everything
// lives in the _test.go files; see README.md for what runs and how.
package integration
