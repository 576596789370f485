package session

import (
	"slices"
	"strconv"
)

// ConnInfo is one client connection as GET /admin/api/connections shows
// it (core/forward/README.md#observability): who it is, where from, what it subscribes to, and — on an
// owner — on whose behalf a gateway forwards it.
type ConnInfo struct {
	Conn     uint64 `json:"conn"`
	ClientID string `json:"client_id,omitempty"`
	User     string `json:"user,omitempty"`
	Remote   string `json:"remote_addr"`
	// Subscriptions are "topic[/group]#partition", local and forwarded.
	Subscriptions []string `json:"subscriptions"`
	// Upstreams lists the owners this connection's operations are
	// forwarded to (a gateway's view).
	Upstreams []string `json:"upstreams,omitempty"`
	// Forwarded is set on an owner for a gateway's upstream session.
	Forwarded *ForwardedInfo `json:"forwarded,omitempty"`
}

// ForwardedInfo describes a forwarded session on its owner: "via node
// OriginNode for user ActingUser".
type ForwardedInfo struct {
	OriginNode   string `json:"origin_node"`
	ActingUser   string `json:"acting_user"`
	ClientID     string `json:"client_id"`
	ClientConn   uint64 `json:"client_conn"`
	ClientRemote string `json:"client_remote_addr"`
	Summary      string `json:"summary"`
}

// connIdentity is what the reader publishes about a connection for other
// goroutines (its own fields are reader-only).
type connIdentity struct {
	sess           *Session
	clientID, user string
	forwarded      *ForwardedInfo
}

// publishIdentity makes the reader's view of the connection readable by
// Connections (reader goroutine, after HELLO, AUTH and FORWARDED_SESSION).
func (c *Conn) publishIdentity() {
	id := &connIdentity{sess: c.sess}
	if c.sess != nil {
		id.clientID = c.sess.id.String()
	}
	if c.principal != nil {
		id.user = c.principal.Name
	}
	if f := c.forwarded; f != nil {
		user := f.ActingUsername
		if user == "" {
			user = "(no authentication at the gateway)"
		}
		id.forwarded = &ForwardedInfo{OriginNode: f.OriginNodeID, ActingUser: f.ActingUsername, ClientID: f.ClientID,
			ClientConn: f.ConnectionID, ClientRemote: f.ClientRemoteAddr,
			Summary: "via node " + f.OriginNodeID + " for user " + user}
	}
	c.identity.Store(id)
}

// Connections lists the open client connections, oldest first.
func (s *Server) Connections() []ConnInfo {
	s.mu.Lock()
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	slices.SortFunc(conns, func(a, b *Conn) int { return int(a.id - b.id) })
	out := make([]ConnInfo, 0, len(conns))
	for _, c := range conns {
		info := ConnInfo{Conn: c.id, Remote: c.remote, Subscriptions: []string{}}
		var sess *Session
		if id := c.identity.Load(); id != nil {
			info.ClientID, info.User, info.Forwarded, sess = id.clientID, id.user, id.forwarded, id.sess
		}
		if sess != nil {
			sess.mu.Lock()
			for key := range sess.subs {
				info.Subscriptions = append(info.Subscriptions, key.String())
			}
			sess.mu.Unlock()
		}
		for _, s := range c.relay.Subscriptions() {
			info.Subscriptions = append(info.Subscriptions, s+" (forwarded)")
		}
		info.Upstreams = append(info.Upstreams, c.relay.Owners()...)
		slices.Sort(info.Subscriptions)
		slices.Sort(info.Upstreams)
		out = append(out, info)
	}
	return out
}

func (k subKey) String() string {
	s := k.topic
	if g, ok := k.group.Get(); ok {
		s += "/" + g
	}
	return s + "#" + strconv.FormatUint(uint64(k.partition), 10)
}
