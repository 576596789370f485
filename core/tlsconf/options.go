package tlsconf

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core/config"
)

// Options are the inputs of Load.
type Options struct {
	// TLS is the config's tls section. Load reads Enabled, CertPath,
	// KeyPath, AutoSelfSigned, ClientAuth, ClientCAPath and AdminEnabled.
	TLS config.TLS
	// DataDir is server.data_dir; generated material lives in DataDir/tls.
	DataDir string
	// Hosts are the names and addresses clients dial, to be covered by a
	// generated server certificate (S-152: pinning skips the hostname check
	// but CA-file and OS-root trust do not). Entries may be "host",
	// "host:port" or "[v6]:port"; IPs become IP SANs, the rest DNS SANs.
	// localhost, 127.0.0.1 and ::1 are always added. Pass the broker and
	// admin advertise endpoints (and the node id if peers verify it).
	Hosts []string
	// Logger receives the CA fingerprint, expiry warnings and reload
	// results; nil discards them.
	Logger *slog.Logger

	now func() time.Time // tests move the clock
}

func (o Options) clock() time.Time {
	if o.now != nil {
		return o.now()
	}
	return time.Now()
}

// clientAuthType maps tls.client_auth to the crypto/tls policy (S-154):
// request verifies a certificate when one is presented and lets certless
// clients through to password auth; require rejects them in the handshake.
func clientAuthType(mode string) (tls.ClientAuthType, error) {
	switch mode {
	case "", config.ClientAuthOff:
		return tls.NoClientCert, nil
	case config.ClientAuthRequest:
		return tls.VerifyClientCertIfGiven, nil
	case config.ClientAuthRequire:
		return tls.RequireAndVerifyClientCert, nil
	}
	return 0, fmt.Errorf("tls.client_auth %q: expected off, request or require", mode)
}

// serverSANs turns Options.Hosts into the SANs a generated server
// certificate must carry: the given names first (the first DNS name is
// also the subject CN), then the loopback names. Unspecified addresses
// (0.0.0.0, ::) from bind-style entries are skipped, as are zones.
func serverSANs(hosts []string) sans {
	var out sans
	addIP := func(a netip.Addr) {
		a = a.Unmap().WithZone("")
		ip := net.IP(a.AsSlice())
		if a.IsUnspecified() || slices.ContainsFunc(out.ips, ip.Equal) {
			return
		}
		out.ips = append(out.ips, ip)
	}
	addDNS := func(n string) {
		n = strings.TrimSuffix(strings.ToLower(n), ".")
		if n != "" && !slices.Contains(out.dns, n) {
			out.dns = append(out.dns, n)
		}
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
		h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if a, err := netip.ParseAddr(h); err == nil {
			addIP(a)
			continue
		}
		addDNS(h)
	}
	addDNS("localhost")
	addIP(netip.MustParseAddr("127.0.0.1"))
	addIP(netip.IPv6Loopback())
	return out
}
