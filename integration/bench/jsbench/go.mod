module github.com/fibrilgo/fibril/integration/bench/jsbench

go 1.26.7

require (
	github.com/fibrilgo/fibril v0.0.0
	github.com/nats-io/nats.go v1.56.0
)

require (
	github.com/klauspost/compress v1.20.0 // indirect
	github.com/nats-io/nkeys v0.4.16 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	golang.org/x/crypto v0.59.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

// benchkit, the measurement core shared with `fibrilctl bench`, comes
// from the work tree this module lives in.
replace github.com/fibrilgo/fibril => ../../..
