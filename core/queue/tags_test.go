package queue

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Delivery tags start at a random point in every process: after a
// failover or a restart, a late ACK relayed with a tag of the old process
// must not name a tag the new process handed out for another message.
// The test runs this test binary twice and compares the first tags.
func TestDeliveryTagsStartAtARandomPointPerProcess(t *testing.T) {
	if os.Getenv("FIBRIL_TAG_PROBE") == "1" {
		fmt.Printf("first-tag=%d\n", tagSeq.Add(1))
		return
	}
	first := func() uint64 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDeliveryTagsStartAtARandomPointPerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "FIBRIL_TAG_PROBE=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("probe: %v\n%s", err, out)
		}
		_, v, ok := strings.Cut(string(out), "first-tag=")
		if !ok {
			t.Fatalf("probe printed no tag:\n%s", out)
		}
		n, err := strconv.ParseUint(strings.Fields(v)[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b := first(), first()
	if a == b {
		t.Fatalf("two processes handed out the same first tag %d", a)
	}
	if a < 1<<32 && b < 1<<32 {
		t.Fatalf("first tags %d and %d: both small, as from a counter starting at 1", a, b)
	}
	if a >= 1<<63 || b >= 1<<63 {
		t.Fatalf("first tags %d and %d: a base must leave room below 2^64", a, b)
	}
}
