package config

import "testing"

// Every accepted form parses into its mode and count and prints back as
// written; the malformed ones are refused.
func TestParseDurability(t *testing.T) {
	for _, c := range []struct {
		in       string
		want     Durability
		required int // for a replica set of 3
	}{
		{"local_durable", Durability{Mode: LocalDurable}, 1},
		{"replica_accepted:2", Durability{Mode: ReplicaAccepted, Nodes: 2}, 2},
		{"replica_durable:1", Durability{Mode: ReplicaDurable, Nodes: 1}, 1},
		{"majority_durable", Durability{Mode: MajorityDurable}, 2},
	} {
		got, err := ParseDurability(c.in)
		if err != nil || got != c.want {
			t.Fatalf("%q: %+v %v", c.in, got, err)
		}
		if got.String() != c.in || got.Required(3) != c.required {
			t.Fatalf("%q: prints %q, requires %d of 3", c.in, got, got.Required(3))
		}
	}
	for _, bad := range []string{"", "majority", "local_durable:1", "majority_durable:2", "replica_durable",
		"replica_durable:", "replica_durable:0", "replica_accepted:-1", "replica_durable:x", "Local_Durable"} {
		if d, err := ParseDurability(bad); err == nil {
			t.Fatalf("%q parsed as %+v", bad, d)
		}
	}
}
