package tcp

import "github.com/fibrilgo/fibril/plugins"

// The transport registers as "tcp", the default transport.backend.
func init() { plugins.RegisterTransport("tcp", Open) }
