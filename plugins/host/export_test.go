package host

import "github.com/fibrilgo/fibril/core"

// PluginPID is the pid of the process behind an external Coordinator (0
// while none runs), for the tests that kill it.
func PluginPID(c core.Coordinator) int {
	return c.(*externalCoordinator).sup.pid()
}

// TransportPluginPID is the pid of the process behind an external
// Transport (0 while none runs), for the tests that kill it.
func TransportPluginPID(t core.Transport) int {
	return t.(*externalTransport).sup.pid()
}
