package benchkit

import (
	"slices"
	"testing"
)

func TestQueueNames(t *testing.T) {
	if got := QueueNames("t", 1); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("one queue: %q", got)
	}
	if got := QueueNames("t", 3); !slices.Equal(got, []string{"t-0", "t-1", "t-2"}) {
		t.Fatalf("three queues: %q", got)
	}
}

func TestTargetIndexWalksEveryTarget(t *testing.T) {
	const n = 12
	for p := range uint32(3) {
		seen := make([]int, n)
		for seq := range uint64(3 * n) {
			i := TargetIndex(p, seq, n)
			if i < 0 || i >= n {
				t.Fatalf("producer %d seq %d: target %d of %d", p, seq, i, n)
			}
			seen[i]++
		}
		for i, c := range seen {
			if c != 3 {
				t.Fatalf("producer %d: target %d taken %d times in 3 rounds", p, i, c)
			}
		}
		if TargetIndex(p, 0, n) != int(p) {
			t.Fatalf("producer %d starts on target %d", p, TargetIndex(p, 0, n))
		}
	}
}

func TestConsumerQueuesCoverEverything(t *testing.T) {
	for _, c := range []int{1, 2, 3, 4, 7} {
		for _, q := range []int{1, 2, 3, 4, 12, 100} {
			readers := make([]int, q)
			for i := range c {
				qs := ConsumerQueues(i, c, q)
				if len(qs) == 0 {
					t.Fatalf("%d consumers, %d queues: consumer %d has none", c, q, i)
				}
				for _, j := range qs {
					readers[j]++
				}
			}
			for j, n := range readers {
				// Each queue is read: by exactly one consumer when there
				// are enough queues to go round, else by c/q or c/q+1.
				if n == 0 || (q >= c && n != 1) || (q < c && (n < c/q || n > c/q+1)) {
					t.Fatalf("%d consumers, %d queues: queue %d has %d consumers", c, q, j, n)
				}
			}
		}
	}
	if got := ConsumerQueues(1, 4, 10); !slices.Equal(got, []int{1, 5, 9}) {
		t.Fatalf("consumer 1 of 4 on 10 queues: %v", got)
	}
	if got := ConsumerQueues(3, 4, 1); !slices.Equal(got, []int{0}) {
		t.Fatalf("consumer 3 of 4 on 1 queue: %v", got)
	}
}
