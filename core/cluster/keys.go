package cluster

import (
	"strconv"

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

func queueKey(topic, group string) string { return prefixQueues + topic + "/" + groupSeg(group) }
func streamKey(topic string) string       { return prefixStreams + topic }

func assignKey(r core.PartitionRef) string {
	return prefixAssign + r.Topic + "/" + groupSeg(r.Group) + "/" + strconv.FormatUint(uint64(r.Partition), 10)
}
