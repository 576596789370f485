// Package benchkit is the measurement core shared by the load generators
// of the Fibril project: `fibrilctl bench` (the Fibril driver, in
// cmd/fibrilctl/internal/bench) and jsbench (the NATS JetStream driver,
// in integration/bench/jsbench, which compare.sh runs side by side with
// it). One implementation measures both systems, so the two cannot drift
// apart: the payload stamp, the pacing schedule (latency from the
// scheduled send time, no coordinated omission), the --max-ahead gate,
// the loss and duplicate accounting, the histograms, the CPU, load and
// pressure readings, the progress lines, and the Result with its JSON
// field names and its table all live here.
//
// A system plugs in through Driver: it connects, declares what it needs,
// opens producers (Publisher) and consumers (a Subscription feeding a
// Handler), and names itself in the Result. Run does everything else.
//
// The package lives beside the command it was taken out of, and imports
// only the standard library. It is not under an internal/ directory
// because jsbench imports it from a module of its own (kept apart so that
// nats.go never becomes a dependency of the main module); it is not a
// stable API for other users.
package benchkit
