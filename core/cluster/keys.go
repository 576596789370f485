package cluster

import (
	"context"
	"strconv"
	"strings"

	"github.com/fibrilgo/fibril/core"
)

// The coordination key space (every backend holds the same layout):
//
//	members/<node>                         NodeInfo, persistent: every node that ever joined
//	nodes/<node>                           NodeInfo with labels, bound to the node's lease: present = live
//	queues/<topic>/<group|@default>        queue declaration (the queue catalog record, JSON)
//	streams/<topic>                        stream declaration (JSON)
//	assign/<topic>/<group|@default>/<n>    Assignment of one partition (JSON)
//	deleted/queue/<topic>/<group|@default> tombstone of a deleted queue (tombstone.go)
//	deleted/stream/<topic>                 tombstone of a deleted stream
//	topics/<topic>                         the topic's kind, claimed once (catalog.go)
//	cohorts/<topic>/<group|@default>/<id>  an exclusive consumer group's plan (cohorts.go)
//	repartition/<topic>/<group|@default>   a queue's partition count change in progress (repartition.go)
//	users                                  the user store document
//	settings/runtime                       the runtime settings document (S-167, S-173)
//
// Names cannot contain '/' or '@' (S-16), so "@default" (the absent group)
// cannot collide with a group and segments need no escaping. Node ids are
// checked by config (no '/').
const (
	prefixMembers = "members/"
	prefixNodes   = "nodes/"
	prefixQueues  = "queues/"
	prefixStreams = "streams/"
	prefixAssign  = "assign/"
	// KeyUsers holds the replicated user store (S-144, S-147).
	KeyUsers = "users"
	// KeySettings holds the runtime settings document (S-173).
	KeySettings = "settings/runtime"

	defaultGroup = "@default"
)

func memberKey(id core.NodeID) string { return prefixMembers + string(id) }
func nodeKey(id core.NodeID) string   { return prefixNodes + string(id) }

func groupSeg(group string) string {
	if group == "" {
		return defaultGroup
	}
	return group
}

// groupOf is groupSeg's inverse: a key segment back to the group ("" for
// the default group).
func groupOf(seg string) string {
	if seg == defaultGroup {
		return ""
	}
	return seg
}

func queueKey(topic, group string) string { return prefixQueues + topic + "/" + groupSeg(group) }
func streamKey(topic string) string       { return prefixStreams + topic }

func assignKey(r core.PartitionRef) string {
	return prefixAssign + r.Topic + "/" + groupSeg(r.Group) + "/" + strconv.FormatUint(uint64(r.Partition), 10)
}

// Restorable returns what a backup puts back into a new cluster under
// key (docs/deploy.md#backup-and-restore), and false for a key it leaves
// out. Restored are the catalog, the kind claims, assignments, cohort
// plans, tombstones, repartitions in progress (they resume), the users and
// the runtime settings — not membership, liveness or a backend's own
// keys, which the new cluster makes itself.
// An assignment comes back with its owner, epoch and written mark but
// without followers: a restored follower holds no copy (a backup holds
// what its broker owned), so none may take a partition over; the
// controller gives each partition followers again, which copy from the
// owner.
func Restorable(key string, value []byte) ([]byte, bool) {
	if strings.HasPrefix(key, prefixAssign) {
		a, ok := decodeAssignment(value)
		if !ok {
			return nil, false
		}
		a.Followers, a.InSync, a.Acks = nil, nil, 0
		return encodeAssignment(a), true
	}
	for _, p := range []string{prefixQueues, prefixStreams, prefixTopics, prefixCohorts, prefixDeleted, prefixRepartition} {
		if strings.HasPrefix(key, p) {
			return value, true
		}
	}
	return value, key == KeyUsers || key == KeySettings
}

// HasCatalog reports whether the cluster's catalog holds a queue or a
// stream (read linearizably).
func (c *Cluster) HasCatalog(ctx context.Context) (bool, error) {
	for _, p := range []string{prefixQueues, prefixStreams} {
		kvs, _, err := c.coord.List(ctx, p)
		if err != nil {
			return false, unavailable(err)
		}
		if len(kvs) > 0 {
			return true, nil
		}
	}
	return false, nil
}
