// Package consul is the Consul coordination backend: core.Coordinator on
// a Consul agent's HTTP API, for operators who already run Consul.
//
// Every primitive maps onto one Consul feature (coordination/README.md
// has the table, README.md here the details):
//
//   - keys live under <prefix>/kv/ and election locks under
//     <prefix>/elections/, so clusters with different prefixes share one
//     Consul without seeing each other;
//   - a key's version is its ModifyIndex; every compare-and-set is one
//     transaction (/v1/txn) that checks the index and writes, so the check
//     and the write are atomic on Consul's servers;
//   - leases are sessions with a TTL, no health checks, behaviour
//     "delete" (a lease's keys go with it) and no lock delay;
//   - Watch is a blocking query on the whole key root, its index kept
//     monotonic across a reset of Consul's index;
//   - an election is a lease-bound lock key created only when absent; the
//     term is that key's ModifyIndex, a Consul raft index, so terms grow.
//
// The package registers itself as the built-in backend "consul"; the
// same Factory is served out of process by cmd/fibril-coord-consul.
package consul
