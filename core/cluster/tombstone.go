package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/core"
)

// Deleting a queue or a stream in a cluster (docs/admin.md#delete). The
// delete writes one record, a tombstone, at deleted/<kind>/<topic>/<group>;
// from the moment a node's view holds it, the name is gone there: the
// snapshot leaves the queue or stream out (routing answers not found, the
// controller places nothing, followers stop), and every node drops its
// copy — partitions, replicas, durable cursors, subscriptions — and, when
// the tombstone names it as pending, confirms by taking itself off the
// list. Pending is every member the cluster ever had: any of them may hold
// the catalog entry, a replica or leftovers of one. Once the list is
// empty, the placement controller removes what is left in coordination
// (assignments, cohort plans, the catalog entry) and marks the tombstone
// finished; until then the name cannot be declared again (ErrConflict),
// so a new queue of that name can never meet an old copy. A finished
// tombstone is kept for finishedKept, so the broker that took the delete
// can report every node's confirmation, and goes when the name is declared
// again. The topic's kind claim stays: the name comes back as the same
// kind only (S-22).

const prefixDeleted = "deleted/"

// finishedKept is how long a finished tombstone stays as a record of the
// deletion.
const finishedKept = time.Minute

// Tombstone is a deletion in progress.
type Tombstone struct {
	Kind       string `json:"kind"` // "queue" or "stream"
	Topic      string `json:"topic"`
	Group      string `json:"group,omitempty"`
	Partitions uint32 `json:"partitions"`
	// Epoch is above every epoch the deleted partitions were assigned
	// under: the tombstone supersedes their assignments, so no owner
	// holds them from here on.
	Epoch  uint64    `json:"epoch"`
	By     string    `json:"by,omitempty"` // the admin user, for the audit trail
	At     time.Time `json:"at"`
	Forced bool      `json:"forced,omitempty"`
	// Pending are the nodes that have not confirmed dropping their copy.
	Pending []core.NodeID `json:"pending"`
	// Dropped is what each node that confirmed dropped.
	Dropped map[core.NodeID]Dropped `json:"dropped,omitempty"`
	// Finished: every node confirmed and the controller removed the
	// name's records; the name may be declared again.
	Finished   bool      `json:"finished,omitempty"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Version is the record's coordination version.
	Version uint64 `json:"-"`
}

// Dropped is one node's confirmation of a deletion.
type Dropped struct {
	At                  time.Time `json:"at"`
	Partitions          int       `json:"partitions"`
	Messages            uint64    `json:"messages,omitempty"`
	Records             uint64    `json:"records,omitempty"`
	SubscriptionsClosed int       `json:"subscriptions_closed,omitempty"`
}

// Name is "queue orders/@default"-style, for logs and errors.
func (t *Tombstone) Name() string {
	if t.Kind == "stream" {
		return "stream " + t.Topic
	}
	return "queue " + t.Topic + "/" + groupSeg(t.Group)
}

// IsPending reports whether node has yet to confirm.
func (t *Tombstone) IsPending(node core.NodeID) bool { return slices.Contains(t.Pending, node) }

func tombstoneKey(kind, topic, group string) string {
	if kind == "stream" {
		return prefixDeleted + "stream/" + topic
	}
	return prefixDeleted + "queue/" + topic + "/" + groupSeg(group)
}

func decodeTombstone(b []byte, version uint64) (*Tombstone, bool) {
	var t Tombstone
	if json.Unmarshal(b, &t) != nil || (t.Kind != "queue" && t.Kind != "stream") || t.Topic == "" {
		return nil, false
	}
	if t.Kind == "stream" {
		t.Group = ""
	}
	t.Version = version
	return &t, true
}

// Tombstone returns the deletion in progress of a queue (kind "queue")
// or a stream, if any.
func (s *Snapshot) Tombstone(kind, topic, group string) *Tombstone {
	return s.deleted[tombstoneKey(kind, topic, group)]
}

// Delete starts deleting a queue (kind "queue", group "" being the
// default group) or a stream: it records the tombstone and waits until
// this node's view holds it. A deletion already in progress is returned
// as it stands (the delete is idempotent); a name that is not declared is
// ErrNotFound. user is the admin user, for the audit trail.
func (c *Cluster) Delete(ctx context.Context, kind, topic, group, user string, forced bool) (*Tombstone, error) {
	key := tombstoneKey(kind, topic, group)
	for range maxDeclareRounds {
		snap := c.Snapshot()
		prev, err := c.readTombstone(ctx, key)
		if err != nil || (prev != nil && !prev.Finished) {
			return prev, err
		}
		var prevVersion uint64
		if prev != nil {
			prevVersion = prev.Version
		}
		var parts []Partition
		catalog := queueKey(topic, group)
		if kind == "stream" {
			catalog = streamKey(topic)
		}
		kv, err := c.coord.Get(ctx, catalog)
		if err != nil {
			return nil, unavailable(err)
		}
		if kv.Version == 0 {
			return nil, core.Errorf(core.ErrNotFound, "%s %s is not declared", kind, displayName(kind, topic, group))
		}
		if kv.Version > snap.Index { // the view trails the declaration: its partitions' epochs matter
			c.awaitIndex(ctx, kv.Version)
			snap = c.Snapshot()
		}
		if kind == "stream" {
			if st := snap.Stream(topic); st != nil {
				parts = st.Parts
			}
		} else if q := snap.Queue(topic, group); q != nil {
			parts = q.Parts
		}
		t := Tombstone{Kind: kind, Topic: topic, Group: group, Partitions: uint32(len(parts)), Epoch: 1,
			By: user, At: c.opts.Now(), Forced: forced, Pending: slices.Clone(snap.MemberIDs)}
		for _, p := range parts {
			t.Epoch = max(t.Epoch, p.Epoch+1)
		}
		if !slices.Contains(t.Pending, c.self) {
			t.Pending = append(t.Pending, c.self)
			slices.Sort(t.Pending)
		}
		b, err := json.Marshal(t)
		if err != nil {
			return nil, core.Errorf(core.ErrInternal, "encode tombstone: %v", err)
		}
		v, err := c.coord.CompareAndSet(ctx, key, b, prevVersion)
		if errors.Is(err, core.ErrVersionConflict) {
			continue // another delete won: read it
		}
		if err != nil {
			return nil, unavailable(err)
		}
		t.Version = v
		c.awaitIndex(ctx, v)
		return &t, nil
	}
	return nil, core.Errorf(core.ErrUnavailable, "delete %s: concurrent changes kept conflicting; retry", topic)
}

func displayName(kind, topic, group string) string {
	if kind == "stream" || group == "" {
		return topic
	}
	return topic + "/" + group
}

// readTombstone reads a tombstone linearizably (nil: none).
func (c *Cluster) readTombstone(ctx context.Context, key string) (*Tombstone, error) {
	return readRecord(ctx, c, key, "tombstone", decodeTombstone)
}

func joinIDs(ids []core.NodeID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = string(id)
	}
	return strings.Join(s, ", ")
}

// ConfirmDropped takes this node off the pending list of the deletion
// named by t (its kind, topic and group), recording what it dropped. It is
// a no-op when the node is not pending or the deletion is finished.
func (c *Cluster) ConfirmDropped(ctx context.Context, t *Tombstone, d Dropped) error {
	return updateRecord(ctx, c, tombstoneKey(t.Kind, t.Topic, t.Group), "tombstone", decodeTombstone, func(cur *Tombstone) bool {
		if !cur.IsPending(c.self) {
			return false
		}
		cur.Pending = slices.DeleteFunc(cur.Pending, func(id core.NodeID) bool { return id == c.self })
		if cur.Dropped == nil {
			cur.Dropped = make(map[core.NodeID]Dropped)
		}
		cur.Dropped[c.self] = d
		return true
	})
}

// finishDeletions is the controller's part: for every tombstone no node
// is pending on, it removes the name's assignments, cohort plans and
// catalog entry, then the tombstone itself. Each removal is
// compare-and-delete on the version just read; a crash or a conflict
// leaves the tombstone, and the next pass goes on from there.
func (c *Cluster) finishDeletions(ctx context.Context, snap *Snapshot) {
	for _, t := range snap.Tombstones {
		if t.Finished {
			if c.opts.Now().Sub(t.FinishedAt) > finishedKept {
				_ = c.coord.CompareAndDelete(ctx, tombstoneKey(t.Kind, t.Topic, t.Group), t.Version) // a conflict: a new declaration took it
			}
			continue
		}
		if len(t.Pending) > 0 {
			continue
		}
		if err := c.finishDeletion(ctx, t); err != nil && ctx.Err() == nil {
			c.log.Warn("could not finish a deletion; the next pass retries", "name", t.Name(), "err", err)
			continue
		}
		c.log.Info("deletion finished: every node dropped its copy; the name may be declared again", "name", t.Name(), "epoch", t.Epoch)
	}
}

func (c *Cluster) finishDeletion(ctx context.Context, t *Tombstone) error {
	seg := t.Topic + "/" + groupSeg(t.Group) + "/"
	catalog := queueKey(t.Topic, t.Group)
	if t.Kind == "stream" {
		catalog = streamKey(t.Topic)
	}
	var kvs []core.KV
	for _, prefix := range []string{prefixAssign + seg, prefixCohorts + seg} {
		l, _, err := c.coord.List(ctx, prefix)
		if err != nil {
			return err
		}
		kvs = append(kvs, l...)
	}
	if t.Kind == "queue" {
		kv, err := c.coord.Get(ctx, repartitionKey(t.Topic, t.Group))
		if err != nil {
			return err
		}
		if kv.Version != 0 {
			kvs = append(kvs, kv)
		}
	}
	kv, err := c.coord.Get(ctx, catalog)
	if err != nil {
		return err
	}
	if kv.Version != 0 {
		kvs = append(kvs, kv) // last: while it stands, the tombstone keeps it out of every view
	}
	for _, kv := range kvs {
		if err := c.coord.CompareAndDelete(ctx, kv.Key, kv.Version); err != nil {
			return err // a conflict too: something wrote meanwhile; look again next pass
		}
	}
	cur, err := c.readTombstone(ctx, tombstoneKey(t.Kind, t.Topic, t.Group))
	if err != nil || cur == nil || len(cur.Pending) > 0 || cur.Finished {
		return err
	}
	cur.Finished, cur.FinishedAt = true, c.opts.Now()
	b, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	_, err = c.coord.CompareAndSet(ctx, tombstoneKey(t.Kind, t.Topic, t.Group), b, cur.Version)
	return err
}

// clearFinished removes the finished tombstone at key before the name is
// declared again; an unfinished one refuses the declaration.
func (c *Cluster) clearFinished(ctx context.Context, key string) error {
	t, err := c.readTombstone(ctx, key)
	if err != nil || t == nil {
		return err
	}
	if !t.Finished {
		return core.Errorf(core.ErrConflict, "%s is being deleted; %d broker(s) have not confirmed dropping it yet (%s); declare it again once they have",
			t.Name(), len(t.Pending), joinIDs(t.Pending))
	}
	if err := c.coord.CompareAndDelete(ctx, key, t.Version); err != nil && !errors.Is(err, core.ErrVersionConflict) {
		return unavailable(err)
	}
	return nil
}
