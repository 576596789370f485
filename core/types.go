package core

import (
	"net"
	"strconv"
	"strings"
)

// NodeID names a broker for life. It is generated once and kept in the data
// directory (or set by coordination.node_id); it is never derived from an
// address, so a broker that moves keeps its identity.
type NodeID string

// Visibility says whether clients may be sent to a broker.
type Visibility string

// Visibilities (broker.visibility). A private broker's addresses never reach
// a client; public brokers serve its partitions by forwarding.
const (
	Public  Visibility = "public"
	Private Visibility = "private"
)

// Well-known node labels. Labels ride the node record and change with it.
const (
	// LabelAdvertise is the comma-separated client endpoint list
	// (host:port, priority order). Absent for private nodes.
	LabelAdvertise = "fibril/advertise"
	// LabelPrivateAdvertise is a private node's own client endpoint list
	// (the LabelAdvertise format), published only while the runtime
	// setting routing.expose_private_endpoints is on; topology answers then
	// list it after the gateway's, each entry tagged TagPrivate
	// (core/routing/README.md#private-endpoints). Routing content: it moves
	// the topology generation.
	LabelPrivateAdvertise = "fibril/private_advertise"
	// LabelDraining is "true" while the node drains (S-128): it gets no new
	// placements.
	LabelDraining = "fibril/draining"
	// LabelVisibility is "private" for private nodes; absent means public.
	LabelVisibility = "fibril/visibility"
	// LabelAdoption is the node's topology adoption level (S-120): the
	// lowest generation its connections acknowledged. Absent until one did.
	LabelAdoption = "fibril/adoption"
	// LabelUpstreamSessions and LabelForwardedSessions count, while
	// non-zero, the upstream sessions this node opened as a gateway and
	// the forwarded sessions it serves as an owner
	// (core/forward/README.md#observability).
	LabelUpstreamSessions  = "fibril/upstream_sessions"
	LabelForwardedSessions = "fibril/forwarded_sessions"
	// LabelFollowers is "1" on a node that reads assignments with
	// followers. A version before followers cannot read such a record (it
	// would drop the partition from its view), so the placement
	// controller plans followers only while every live node carries it:
	// a rolling upgrade gets followers once its last old node is gone.
	LabelFollowers = "fibril/followers"
	// LabelFeatures lists, comma-separated, the features of shared state
	// a node's build supports ("permissions": user store format 2). A
	// feature that changes what every broker must read is switched on
	// only while every member announces it (a rolling upgrade finishes
	// first).
	LabelFeatures = "fibril/features"
	// LabelTails carries a follower's durable tails of the partitions
	// it follows whose owner is not live: what the placement controller
	// reads to promote one (core/cluster, failover.go).
	LabelTails = "fibril/tails"
	// LabelCohorts carries the members of the exclusive consumer groups
	// subscribed to partitions this node owns, with those partitions
	// (cluster.FormatCohortMembers): what the controller plans cohorts
	// from (docs/semantics.md#s-98).
	LabelCohorts = "fibril/cohorts"
)

// Labels are a node's key/value annotations.
type Labels map[string]string

// Clone returns an independent copy (nil stays nil).
func (l Labels) Clone() Labels {
	if l == nil {
		return nil
	}
	out := make(Labels, len(l))
	for k, v := range l {
		out[k] = v
	}
	return out
}

// TagPrivate tags a private owner's own endpoints in a topology entry,
// listed after the gateway's untagged ones (docs/protocol.md#endpoints).
const TagPrivate = "private"

// Endpoint is one client-facing address a broker advertises (docs/protocol.md#endpoints).
// Host is a DNS name, an IPv4 literal or a bracketed IPv6 literal.
type Endpoint struct {
	Host string
	Port uint16
	Tags []string
}

// String is host:port as clients dial it.
func (e Endpoint) String() string {
	return e.Host + ":" + strconv.Itoa(int(e.Port))
}

// Equal compares host and port (tags are not part of an address, S-121).
func (e Endpoint) Equal(o Endpoint) bool {
	return strings.EqualFold(e.Host, o.Host) && e.Port == o.Port
}

// ParseEndpoint parses host:port, bracketing a bare IPv6 literal.
func ParseEndpoint(s string) (Endpoint, error) {
	host, port, err := net.SplitHostPort(strings.TrimSpace(s))
	if err != nil {
		return Endpoint{}, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return Endpoint{}, &net.AddrError{Err: "bad port", Addr: s}
	}
	if host == "" {
		return Endpoint{}, &net.AddrError{Err: "missing host", Addr: s}
	}
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		host = "[" + host + "]"
	}
	return Endpoint{Host: host, Port: uint16(p)}, nil
}

// ParseEndpoints parses a comma-separated endpoint list (the
// LabelAdvertise format). Empty input gives an empty list.
func ParseEndpoints(s string) ([]Endpoint, error) {
	var out []Endpoint
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		e, err := ParseEndpoint(part)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// FormatEndpoints is the inverse of ParseEndpoints.
func FormatEndpoints(list []Endpoint) string {
	parts := make([]string, len(list))
	for i, e := range list {
		parts[i] = e.String()
	}
	return strings.Join(parts, ",")
}

// NodeInfo is a broker's registry record.
type NodeInfo struct {
	ID        NodeID `json:"id"`
	PeerAddr  string `json:"peer_addr"`  // where peers reach it (host:port)
	AdminAddr string `json:"admin_addr"` // its admin listener (host:port)
	Labels    Labels `json:"labels,omitempty"`
}

// Visibility reads LabelVisibility.
func (n NodeInfo) Visibility() Visibility {
	if n.Labels[LabelVisibility] == string(Private) {
		return Private
	}
	return Public
}

// Draining reads LabelDraining.
func (n NodeInfo) Draining() bool { return n.Labels[LabelDraining] == "true" }

// Advertise reads LabelAdvertise; a malformed label counts as empty.
func (n NodeInfo) Advertise() []Endpoint {
	list, err := ParseEndpoints(n.Labels[LabelAdvertise])
	if err != nil {
		return nil
	}
	return list
}

// PartitionRef names one queue partition (or stream partition, Group "").
// An absent group and the literal "default" are both "" (S-17).
type PartitionRef struct {
	Topic     string `json:"topic"`
	Group     string `json:"group,omitempty"`
	Partition uint32 `json:"partition"`
}

// String is topic[/group]#partition, for logs.
func (p PartitionRef) String() string {
	s := p.Topic
	if p.Group != "" {
		s += "/" + p.Group
	}
	return s + "#" + strconv.FormatUint(uint64(p.Partition), 10)
}

// Owner is a partition's assignment: the node that serves it and the epoch
// of the assignment. The epoch rises whenever the owner changes, and a
// write carrying an older epoch is refused (S-134).
type Owner struct {
	Node  NodeID `json:"node"`
	Epoch uint64 `json:"epoch"`
}
