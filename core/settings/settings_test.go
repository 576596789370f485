package settings

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/config"
)

func seed() Document {
	d := config.Defaults()
	return Seed(d.RuntimeSeed, config.DefaultRuntime())
}

// S-167: boot seeds create the document only when none exists; afterwards
// the persisted document wins.
func TestSeedOnlyWhenAbsent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "runtime-settings.json")
	s, err := Open(path, seed())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Current(); got.Version != 1 || got.Connection.ReconnectGraceMS != 5000 || got.Routing.ForwardTimeoutMS != 30000 {
		t.Fatalf("seeded document = %+v", got)
	}
	d := s.Current()
	d.Connection.ReconnectGraceMS = 1234
	if _, err := s.Replace(1, d); err != nil {
		t.Fatal(err)
	}
	other := seed()
	other.Connection.ReconnectGraceMS = 9999
	s2, err := Open(path, other)
	if err != nil {
		t.Fatal(err)
	}
	if got := s2.Current(); got.Version != 2 || got.Connection.ReconnectGraceMS != 1234 {
		t.Fatalf("after reopen = %+v, want the persisted version 2 with grace 1234", got)
	}
}

// S-162: a stale version is a conflict, an invalid document a bad request;
// neither changes anything.
func TestReplaceChecks(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "rs.json"), seed())
	if err != nil {
		t.Fatal(err)
	}
	d := s.Current()
	if _, err := s.Replace(7, d); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("stale version: err = %v, want ErrConflict", err)
	}
	d.Partitioning.DefaultPartitionCount = 0
	if _, err := s.Replace(1, d); !errors.Is(err, core.ErrBadRequest) {
		t.Fatalf("invalid: err = %v, want ErrBadRequest", err)
	}
	if s.Current().Version != 1 || s.Current().Partitioning.DefaultPartitionCount != 1 {
		t.Fatal("a refused Replace changed the document")
	}
}

// A corrupt document is an error, never a silent fall-back to the seeds.
func TestCorruptDocumentRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rs.json")
	if err := os.WriteFile(path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, seed()); err == nil {
		t.Fatal("Open accepted a corrupt document")
	}
	if err := os.WriteFile(path, []byte(`{"version":3,"delivery":{"inflight_ttl_ms":0}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, seed()); err == nil {
		t.Fatal("Open accepted an invalid document")
	}
}

// The replication group's problems name the setting, and a fixed node
// count larger than the copies a partition may have names both numbers.
func TestReplicationValidation(t *testing.T) {
	if got := seed().Replication; got.TargetFollowers != 2 || got.Durability != "majority_durable" ||
		got.ConfirmTimeoutMS != 5000 || got.ISRTimeoutMS != 10000 || got.MinInSyncReplicas != 1 {
		t.Fatalf("defaults %+v", got)
	}
	for _, c := range []struct {
		edit func(*Replication)
		want []string
	}{
		{func(r *Replication) { r.TargetFollowers = -1 }, []string{"replication.target_followers"}},
		{func(r *Replication) { r.Durability = "quorum" }, []string{"replication.durability", "quorum"}},
		{func(r *Replication) { r.Durability = "" }, []string{"replication.durability"}},
		{func(r *Replication) { r.Durability = "replica_durable:0" }, []string{"replication.durability"}},
		{func(r *Replication) { r.Durability = "replica_durable:4" }, []string{"replication.durability", "replication.target_followers", "4", "3"}},
		{func(r *Replication) { r.ConfirmTimeoutMS = 0 }, []string{"replication.confirm_timeout_ms"}},
		{func(r *Replication) { r.ISRTimeoutMS = 0 }, []string{"replication.isr_timeout_ms"}},
		{func(r *Replication) { r.MinInSyncReplicas = 0 }, []string{"replication.min_in_sync_replicas"}},
	} {
		d := seed()
		c.edit(&d.Replication)
		err := d.Validate()
		if err == nil {
			t.Fatalf("%+v: accepted", d.Replication)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v does not name %q", d.Replication, err, w)
			}
		}
	}
	d := seed()
	d.Replication.TargetFollowers, d.Replication.Durability = 0, "local_durable"
	if err := d.Validate(); err != nil {
		t.Fatalf("no followers, local_durable: %v", err)
	}
	d.Replication.TargetFollowers, d.Replication.Durability = 1, "replica_accepted:2"
	if err := d.Validate(); err != nil {
		t.Fatalf("one follower, replica_accepted:2: %v", err)
	}
	if p := d.Replication.Policy(); p.Mode != config.ReplicaAccepted || p.Nodes != 2 {
		t.Fatalf("policy %+v", p)
	}
}

// The limits group: each entry names a topic once, a positive limit and a
// known overflow policy; a valid change wakes Changed.
func TestLimitsValidationAndChanged(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "runtime-settings.json"), seed())
	if err != nil {
		t.Fatal(err)
	}
	bad := s.Current()
	bad.Limits.Queues = []QueueLimit{
		{Topic: "a", MaxMessagesPerPartition: 0, Overflow: "reject_publish"},
		{Topic: "a", MaxMessagesPerPartition: 5, Overflow: "spill"},
		{MaxMessagesPerPartition: 5, Overflow: "drop_oldest"},
	}
	_, err = s.Replace(1, bad)
	for _, want := range []string{"limits.queues[0].max_messages_per_partition", "limits.queues[1]: a second limit", `limits.queues[1].overflow = "spill"`, "limits.queues[2].topic: required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Replace error %v lacks %q", err, want)
		}
	}
	ch := s.Changed()
	good := s.Current()
	good.Limits.Queues = []QueueLimit{{Topic: "a", Group: "g", MaxMessagesPerPartition: 10, Overflow: OverflowDropOldest}}
	if _, err := s.Replace(1, good); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	default:
		t.Fatal("Changed was not closed by Replace")
	}
	if l := s.Current().Limits.Queues; len(l) != 1 || l[0].MaxMessagesPerPartition != 10 {
		t.Fatalf("limits %+v", l)
	}
}
