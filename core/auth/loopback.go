package auth

import (
	"net"
	"net/netip"
	"strings"
)

// IsLoopback reports whether a peer address is loopback: 127.0.0.0/8, ::1,
// or either of those written as an IPv4-mapped IPv6 address (a dual-stack
// listener reports IPv4 peers as ::ffff:127.0.0.1). The zone is ignored
// (::1%lo is loopback). An invalid address is not loopback.
func IsLoopback(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	return a.IsValid() && a.IsLoopback()
}

// PeerAddr extracts the IP of a connection's remote address, unmapping
// IPv4-mapped IPv6 addresses (a dual-stack listener and net.ParseIP both
// produce them) so that logs show 192.0.2.1 rather than ::ffff:192.0.2.1. It returns
// the zero netip.Addr (never loopback) for anything that is not an IP
// address, such as a Unix socket or net.Pipe.
func PeerAddr(a net.Addr) netip.Addr {
	switch v := a.(type) {
	case *net.TCPAddr:
		return v.AddrPort().Addr().Unmap()
	case *net.UDPAddr:
		return v.AddrPort().Addr().Unmap()
	case nil:
		return netip.Addr{}
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// LoopbackOnly reports whether a listener bound to bindAddr (host:port, as
// in broker.listener.bind) can only be reached from this host: the host is
// a loopback IP or "localhost". Wildcards (":9876", "0.0.0.0", "[::]"),
// other names and unparsable values are not loopback-only, so the startup
// warning errs on the side of speaking up.
func LoopbackOnly(bindAddr string) bool {
	host, _, err := net.SplitHostPort(bindAddr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && IsLoopback(a)
}
