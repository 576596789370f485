package queue

// minHeap is a small generic binary min-heap. container/heap would box
// every element into an interface (an allocation per push); the engine
// pushes on every TTL publish and every delivery, so it keeps its own.
type minHeap[T any] struct {
	s    []T
	less func(a, b T) bool
	// moved, when set, is told each element's new index (the lease heap
	// uses it to remove a settled delivery in O(log n)).
	moved func(x T, i int)
}

func (h *minHeap[T]) Len() int { return len(h.s) }

// Peek returns the smallest element; the heap must not be empty.
func (h *minHeap[T]) Peek() T { return h.s[0] }

func (h *minHeap[T]) Push(x T) {
	h.s = append(h.s, x)
	h.up(len(h.s) - 1)
}

// Pop removes and returns the smallest element; the heap must not be empty.
func (h *minHeap[T]) Pop() T { return h.Remove(0) }

// Remove removes and returns the element at index i.
func (h *minHeap[T]) Remove(i int) T {
	x := h.s[i]
	last := len(h.s) - 1
	if i != last {
		h.s[i] = h.s[last]
		h.set(i)
	}
	var zero T
	h.s[last] = zero
	h.s = h.s[:last]
	if i < last {
		if !h.down(i) {
			h.up(i)
		}
	}
	if h.moved != nil {
		h.moved(x, -1)
	}
	return x
}

// Filter keeps the elements for which keep returns true and restores the
// heap order: the engine's lazy-deletion heaps call it when stale entries
// outnumber live ones.
func (h *minHeap[T]) Filter(keep func(T) bool) {
	out := h.s[:0]
	for _, x := range h.s {
		if keep(x) {
			out = append(out, x)
		}
	}
	var zero T
	for i := len(out); i < len(h.s); i++ {
		h.s[i] = zero
	}
	h.s = out
	if cap(h.s) > 64 && len(h.s) < cap(h.s)/4 {
		h.s = append([]T(nil), h.s...)
	}
	for i := range h.s {
		h.set(i)
	}
	for i := len(h.s)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *minHeap[T]) set(i int) {
	if h.moved != nil {
		h.moved(h.s[i], i)
	}
}

func (h *minHeap[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.s[i], h.s[p]) {
			break
		}
		h.s[i], h.s[p] = h.s[p], h.s[i]
		h.set(i)
		i = p
	}
	h.set(i)
}

func (h *minHeap[T]) down(i int) bool {
	i0, n := i, len(h.s)
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h.less(h.s[r], h.s[l]) {
			c = r
		}
		if !h.less(h.s[c], h.s[i]) {
			break
		}
		h.s[i], h.s[c] = h.s[c], h.s[i]
		h.set(i)
		i = c
	}
	h.set(i)
	return i > i0
}

// due is a (time, offset) heap entry: TTL deadlines and delays.
type due struct {
	at  int64 // unix ms
	off uint64
}

func dueLess(a, b due) bool { return a.at < b.at || (a.at == b.at && a.off < b.off) }

func offLess(a, b uint64) bool { return a < b }
