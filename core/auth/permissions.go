package auth

import (
	"slices"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// What a user may do with topics (docs/admin.md#permissions). A user
// without a permission list may do everything, as before lists existed;
// a user with one may do only what an entry allows: the action is in the
// entry's actions and the topic matches one of its patterns. An empty
// list allows nothing.

// Action is something done with a topic.
type Action string

// The actions.
const (
	ActionDeclare Action = "declare" // DECLARE_QUEUE, DECLARE_PLEXUS
	ActionPublish Action = "publish" // PUBLISH, PUBLISH_DELAYED
	ActionConsume Action = "consume" // SUBSCRIBE, SUBSCRIBE_STREAM (and settling what they deliver)
)

// Actions lists every action.
var Actions = []Action{ActionDeclare, ActionPublish, ActionConsume}

// Permission allows its actions on the topics its patterns match. A
// pattern is a topic name in which '*' stands for any run of characters
// ("orders", "orders.*", "*": every topic).
type Permission struct {
	Topics  []string `json:"topics"`
	Actions []Action `json:"actions"`
}

// Permissions is a user's list; nil means unrestricted.
type Permissions []Permission

// Allows reports whether the list allows action on topic (a nil list
// allows everything).
func (ps Permissions) Allows(action Action, topic string) bool {
	if ps == nil {
		return true
	}
	for _, p := range ps {
		if !slices.Contains(p.Actions, action) {
			continue
		}
		for _, pat := range p.Topics {
			if matchTopic(pat, topic) {
				return true
			}
		}
	}
	return false
}

// Validate checks every entry: at least one pattern and one action, known
// actions, patterns that are topic names apart from '*'.
func (ps Permissions) Validate() error {
	for i, p := range ps {
		if len(p.Topics) == 0 || len(p.Actions) == 0 {
			return core.Errorf(core.ErrBadRequest, "permission %d: it needs topics and actions", i+1)
		}
		for _, a := range p.Actions {
			if !slices.Contains(Actions, a) {
				return core.Errorf(core.ErrBadRequest, "permission %d: unknown action %q (declare, publish, consume)", i+1, a)
			}
		}
		for _, t := range p.Topics {
			if t == "" || strings.ContainsAny(t, "/@") || len(t) > 255 {
				return core.Errorf(core.ErrBadRequest, "permission %d: topic pattern %q: a topic name, with * for any run of characters", i+1, t)
			}
		}
	}
	return nil
}

// matchTopic matches pattern, in which '*' stands for any run of
// characters (none included), against topic.
func matchTopic(pattern, topic string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == topic
	}
	if !strings.HasPrefix(topic, parts[0]) {
		return false
	}
	rest := topic[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, mid := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, mid)
		if i < 0 {
			return false
		}
		rest = rest[i+len(mid):]
	}
	return strings.HasSuffix(rest, last) && len(rest) >= len(last)
}

// Denied is the refusal of action on topic for user, as the client reads
// it (ERROR 403).
func Denied(user string, action Action, topic string) error {
	return core.Errorf(core.ErrForbidden, "user %q may not %s on topic %q", user, action, topic)
}

// Permissions returns name's list (nil: unrestricted) and whether the
// store has such a user.
func (s *Store) Permissions(name string) (Permissions, bool) {
	u, ok := (*s.cur.Load())[name]
	return u.Permissions, ok
}

// SetPermissions replaces name's list; nil makes the user unrestricted
// (ErrNotFound if there is no such user).
func (s *Store) SetPermissions(name string, ps Permissions) error {
	if err := ps.Validate(); err != nil {
		return err
	}
	if ps != nil {
		ps = slices.Clone(ps)
	}
	return s.update(func(set userSet, _ time.Time) error {
		u, ok := set[name]
		if !ok {
			return notFound(name)
		}
		u.Permissions = ps
		set[name] = u
		return nil
	})
}
