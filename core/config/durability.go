package config

import (
	"fmt"
	"strconv"
	"strings"
)

// DurabilityMode is the kind of a replication.durability policy: what a
// replicated partition's owner waits for before it confirms a publish.
type DurabilityMode int

const (
	// LocalDurable confirms once the owner has fsynced.
	LocalDurable DurabilityMode = iota
	// ReplicaAccepted confirms once Nodes replicas, the owner included,
	// have accepted the record (no fsync needed on the followers).
	ReplicaAccepted
	// ReplicaDurable confirms once Nodes replicas, the owner included,
	// have fsynced the record.
	ReplicaDurable
	// MajorityDurable confirms once a majority of the partition's replica
	// set (owner and followers) has fsynced the record.
	MajorityDurable
)

var durabilityNames = [...]string{"local_durable", "replica_accepted", "replica_durable", "majority_durable"}

// String is the mode's name as written in the setting.
func (m DurabilityMode) String() string {
	if int(m) < len(durabilityNames) {
		return durabilityNames[m]
	}
	return fmt.Sprintf("DurabilityMode(%d)", int(m))
}

// Durability is a parsed replication.durability value. Nodes is the N of
// `replica_accepted:N` and `replica_durable:N` (replicas counting the
// owner) and 0 for the other modes.
type Durability struct {
	Mode  DurabilityMode
	Nodes int
}

// String renders the setting's form (the inverse of ParseDurability).
func (d Durability) String() string {
	if d.Mode == ReplicaAccepted || d.Mode == ReplicaDurable {
		return d.Mode.String() + ":" + strconv.Itoa(d.Nodes)
	}
	return d.Mode.String()
}

// Required is how many replicas, the owner included, must hold a record
// before it is confirmed when the partition has `replicas` of them (owner
// plus followers).
func (d Durability) Required(replicas int) int {
	switch d.Mode {
	case ReplicaAccepted, ReplicaDurable:
		return d.Nodes
	case MajorityDurable:
		return replicas/2 + 1
	}
	return 1
}

// ParseDurability parses replication.durability: `local_durable`,
// `replica_accepted:N`, `replica_durable:N` (N ≥ 1, replicas counting the
// owner) or `majority_durable`.
func ParseDurability(s string) (Durability, error) {
	name, n, hasN := strings.Cut(s, ":")
	switch name {
	case "local_durable", "majority_durable":
		if hasN {
			return Durability{}, fmt.Errorf("%q: %s takes no node count", s, name)
		}
		if name == "local_durable" {
			return Durability{Mode: LocalDurable}, nil
		}
		return Durability{Mode: MajorityDurable}, nil
	case "replica_accepted", "replica_durable":
		if !hasN {
			return Durability{}, fmt.Errorf("%q: %s needs a node count, as in %s:2", s, name, name)
		}
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 {
			return Durability{}, fmt.Errorf("%q: the node count must be an integer of at least 1", s)
		}
		if name == "replica_accepted" {
			return Durability{Mode: ReplicaAccepted, Nodes: v}, nil
		}
		return Durability{Mode: ReplicaDurable, Nodes: v}, nil
	}
	return Durability{}, fmt.Errorf("%q is not local_durable, replica_accepted:N, replica_durable:N or majority_durable", s)
}

// durabilityCheck is the key table's check of replication.durability.
func durabilityCheck(v any) error {
	_, err := ParseDurability(v.(string))
	return err
}
