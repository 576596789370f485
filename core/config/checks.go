package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Value checks used by the key table. Each receives the typed value and
// returns an error that reads well after "key: ".

// checkHostPort parses "host:port". A listener may leave the host empty
// (all interfaces) and use port 0 (any free port, handy in tests); an
// address someone else dials needs both a host and a real port.
func checkHostPort(s string, listen bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return fmt.Errorf("%q is not host:port: %s", s, ae.Err)
		}
		return fmt.Errorf("%q is not host:port", s)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", s, port)
	}
	if !listen && p == 0 {
		return fmt.Errorf("%q: port 0 cannot be dialed; give the real port", s)
	}
	if host == "" && !listen {
		return fmt.Errorf("%q: a dialable address needs a host", s)
	}
	if strings.IndexFunc(host, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return fmt.Errorf("%q: the host contains a space or control character", s)
	}
	return nil
}

// bindAddr checks a listener address.
func bindAddr(v any) error { return checkHostPort(v.(string), true) }

// optionalBindAddr checks a listener address that may be empty (derived later).
func optionalBindAddr(v any) error {
	if v.(string) == "" {
		return nil
	}
	return bindAddr(v)
}

// optionalDialAddr checks an advertised address that may be empty.
func optionalDialAddr(v any) error {
	if v.(string) == "" {
		return nil
	}
	return checkHostPort(v.(string), false)
}

// dialAddrList checks every entry of an advertise list.
func dialAddrList(v any) error {
	for i, s := range v.([]string) {
		if err := checkHostPort(s, false); err != nil {
			return fmt.Errorf("entry %d: %w", i+1, err)
		}
	}
	return nil
}

// nonEmpty rejects an empty or blank string.
func nonEmpty(v any) error {
	if strings.TrimSpace(v.(string)) == "" {
		return errors.New("must not be empty")
	}
	return nil
}

var (
	pluginNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	nodeIDRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
)

// pluginName checks a plugin name: built-in names and catalog entries are
// lower-case tokens, so anything else is surely a typo or a path by mistake.
func pluginName(v any) error {
	if s := v.(string); !pluginNameRE.MatchString(s) {
		return fmt.Errorf("%q is not a plugin name (lower-case letters, digits, '-' and '_', starting with a letter, at most 63 characters)", s)
	}
	return nil
}

// checkNodeID checks a node id. Ids travel in coordination records and must
// match a certificate SAN under inter-broker TLS, so they stay DNS-label-like.
func checkNodeID(s string) error {
	if !nodeIDRE.MatchString(s) {
		return fmt.Errorf("%q is not a node id (letters, digits, '.', '-' and '_', starting with a letter or digit, at most 128 characters)", s)
	}
	return nil
}

// optionalNodeID checks coordination.node_id, empty meaning "generate".
func optionalNodeID(v any) error {
	if v.(string) == "" {
		return nil
	}
	return checkNodeID(v.(string))
}

// raftPeers checks a list of "id=host:port" entries with distinct ids.
func raftPeers(v any) error {
	seen := map[string]bool{}
	for i, s := range v.([]string) {
		p, err := ParseRaftPeer(s)
		if err != nil {
			return fmt.Errorf("entry %d: %w", i+1, err)
		}
		if seen[p.ID] {
			return fmt.Errorf("entry %d: node id %q is listed twice", i+1, p.ID)
		}
		seen[p.ID] = true
	}
	return nil
}

// RaftPeer is one parsed coordination.raft.peers entry.
type RaftPeer struct {
	ID   string
	Addr string
}

// ParseRaftPeer parses "id=host:port".
func ParseRaftPeer(s string) (RaftPeer, error) {
	id, addr, ok := strings.Cut(s, "=")
	if !ok {
		return RaftPeer{}, fmt.Errorf("%q is not id=host:port", s)
	}
	id, addr = strings.TrimSpace(id), strings.TrimSpace(addr)
	if err := checkNodeID(id); err != nil {
		return RaftPeer{}, err
	}
	if err := checkHostPort(addr, false); err != nil {
		return RaftPeer{}, err
	}
	return RaftPeer{ID: id, Addr: addr}, nil
}

// checkUsername applies S-147: names starting with "@" are reserved for
// principals such as @node and can never be created.
func checkUsername(s string) error {
	switch {
	case s == "":
		return errors.New("the username is empty")
	case strings.HasPrefix(s, "@"):
		return fmt.Errorf("username %q starts with '@', which is reserved for broker principals such as @node; choose a name without it", s)
	case strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return fmt.Errorf("username %q contains a space or control character", s)
	}
	return nil
}

// optionalUsername checks the environment seed user's name, empty meaning
// "no such user".
func optionalUsername(v any) error {
	if v.(string) == "" {
		return nil
	}
	return checkUsername(v.(string))
}

// checkArgon2idPHC checks that s is an argon2id hash in PHC string format,
// "$argon2id$v=19$m=<KiB>,t=<passes>,p=<lanes>$<salt>$<hash>" with
// unpadded base64 salt and hash: the only form the user store accepts, so a
// plain password pasted by mistake is caught at load and never stored.
func checkArgon2idPHC(s string) error {
	const form = "expected an argon2id PHC string ($argon2id$v=19$m=…,t=…,p=…$salt$hash)"
	parts := strings.Split(s, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return errors.New(form)
	}
	if parts[2] != "v=19" {
		return fmt.Errorf("%s; version %q is not v=19", form, parts[2])
	}
	params := map[string]bool{}
	for _, kv := range strings.Split(parts[3], ",") {
		name, val, ok := strings.Cut(kv, "=")
		n, err := strconv.ParseUint(val, 10, 32)
		if !ok || err != nil || n == 0 || (name != "m" && name != "t" && name != "p") || params[name] {
			return fmt.Errorf("%s; bad parameter %q", form, kv)
		}
		params[name] = true
	}
	if len(params) != 3 {
		return fmt.Errorf("%s; parameters m, t and p are all required", form)
	}
	for i, what := range map[int]string{4: "salt", 5: "hash"} {
		b, err := base64.RawStdEncoding.DecodeString(parts[i])
		if err != nil || len(b) == 0 {
			return fmt.Errorf("%s; the %s is not unpadded base64", form, what)
		}
	}
	return nil
}
