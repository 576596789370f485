package benchkit

import "strconv"

// A run may spread its messages over several queues (streams, subjects),
// each with its partitions. The rules are here, so that a layout such as
// "100 queues of 1 partition" means the same thing in every driver.

// QueueNames names the n queues of a run on base: base itself for one
// queue, else base-0 … base-(n-1).
func QueueNames(base string, n int) []string {
	if n <= 1 {
		return []string{base}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = base + "-" + strconv.Itoa(i)
	}
	return out
}

// TargetIndex picks, of the n targets of a run (every partition of every
// queue, listed queue by queue), the one that message seq of producer p
// goes to: (seq + p) mod n. Each producer walks all the targets in turn,
// the producers starting on different ones.
func TargetIndex(producer uint32, seq uint64, n int) int {
	return int((seq + uint64(producer)) % uint64(n))
}

// ConsumerQueues lists the queues, of q, that consumer i of c subscribes
// to (to every partition of each). With at least as many queues as
// consumers, queue j goes to consumer j mod c, so each queue has one
// consumer; with fewer, consumer i takes queue i mod q, so the consumers
// of a queue compete on it (one queue: all of them, as with no --queues).
// Either way every queue has a consumer and every consumer a queue.
func ConsumerQueues(i, c, q int) []int {
	if q <= c {
		return []int{i % q}
	}
	out := make([]int, 0, (q+c-1)/c)
	for j := i; j < q; j += c {
		out = append(out, j)
	}
	return out
}
