package bench

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// TestCoalescingConnKeepsEveryWrite sends numbered records from several
// goroutines through a coalescing connection and checks that the other
// end receives each exactly once, intact, and in per-writer order.
func TestCoalescingConnKeepsEveryWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const writers, perWriter, recLen = 8, 5000, 64
	type rec struct{ w, seq uint32 }
	got := make(chan rec, writers*perWriter)
	recvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			recvErr <- err
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		buf := make([]byte, recLen)
		for i := 0; i < writers*perWriter; i++ {
			if _, err := io.ReadFull(br, buf); err != nil {
				recvErr <- err
				return
			}
			w, seq := binary.LittleEndian.Uint32(buf), binary.LittleEndian.Uint32(buf[4:])
			for _, b := range buf[8:] {
				if b != byte(w+seq) {
					recvErr <- io.ErrUnexpectedEOF
					return
				}
			}
			got <- rec{w, seq}
		}
		recvErr <- nil
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := newCoalescingConn(raw)
	defer c.Close()
	var mu sync.Mutex // writes of whole records are serialized, as the client's are
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, recLen) // reused: Write must copy
			for seq := 0; seq < perWriter; seq++ {
				binary.LittleEndian.PutUint32(buf, uint32(w))
				binary.LittleEndian.PutUint32(buf[4:], uint32(seq))
				for i := 8; i < recLen; i++ {
					buf[i] = byte(w + seq)
				}
				mu.Lock()
				_, err := c.Write(buf)
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-recvErr:
		if err != nil {
			t.Fatalf("receiver: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("receiver did not get every record")
	}
	close(got)
	next := make([]uint32, writers)
	for r := range got {
		if r.seq != next[r.w] {
			t.Fatalf("writer %d: got seq %d, want %d", r.w, r.seq, next[r.w])
		}
		next[r.w]++
	}
	// After Close, writes fail.
	c.Close()
	if _, err := c.Write([]byte("x")); err == nil {
		t.Fatal("write after close succeeded")
	}
}
