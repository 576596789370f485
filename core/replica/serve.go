package replica

import (
	"context"
	"io"
	"sync"

	"github.com/fibrilgo/fibril/core/wire"
)

// Serve answers a connection that carries replication only (the
// follower's, after its node login) with src until the connection fails
// or ctx ends: pull reads and checkpoint exports on the reader, each
// stream on its own goroutine. Frames of an unknown stream are ignored (a
// stream that ended may still get the follower's last progress); any
// other op is answered with ERROR 400.
func Serve(ctx context.Context, conn io.ReadWriter, src *Source, maxFrame uint32) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if c, ok := conn.(io.Closer); ok {
			c.Close()
		}
	})
	defer stop()
	fr := &frames{conn: conn, max: maxFrame}
	var wg sync.WaitGroup
	streams := make(map[uint64]chan Frame)
	var mu sync.Mutex // streams, also changed by ending streams
	defer func() {
		mu.Lock()
		for id, ch := range streams {
			close(ch)
			delete(streams, id)
		}
		mu.Unlock()
		cancel()
		wg.Wait()
	}()
	for {
		f, err := fr.read()
		if err != nil {
			return err
		}
		switch b := f.Body.(type) {
		case *wire.ReplicationStreamStart:
			start := *b
			start.Key.Topic = string([]byte(b.Key.Topic)) // the frame buffer is reused
			ch := make(chan Frame, 16)
			mu.Lock()
			if old, ok := streams[f.RequestID]; ok {
				close(old) // a new START with the same id replaces the stream
			}
			streams[f.RequestID] = ch
			mu.Unlock()
			wg.Add(1)
			go func(id uint64) {
				defer wg.Done()
				_ = src.Stream(ctx, id, &start, ch, fr)
				mu.Lock()
				if streams[id] == ch {
					delete(streams, id)
				}
				mu.Unlock()
			}(f.RequestID)
		case *wire.ReplicationStreamProgress, *wire.ReplicationStreamReset:
			mu.Lock()
			ch := streams[f.RequestID]
			mu.Unlock()
			if ch != nil {
				select {
				case ch <- f:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		case *wire.ReplicationRead:
			ok, err := src.Read(ctx, &b.ReadRequest)
			var body wire.Encoder
			if err == nil {
				body = &wire.ReplicationReadOK{ReadOK: *ok}
			}
			if err := answer(fr, f.RequestID, wire.OpReplicationReadOK, body, err); err != nil {
				return err
			}
		case *wire.ReplicationCheckpointExport:
			cp, err := src.Checkpoint(b.Key, "")
			var body wire.Encoder
			if err == nil {
				body = &wire.ReplicationCheckpointExportOK{StateCheckpoint: *cp}
			}
			if err := answer(fr, f.RequestID, wire.OpReplicationCheckpointExportOK, body, err); err != nil {
				return err
			}
		default:
			if f.Op == wire.OpReplicationStreamStop {
				mu.Lock()
				if ch := streams[f.RequestID]; ch != nil {
					close(ch)
					delete(streams, f.RequestID)
				}
				mu.Unlock()
				continue
			}
			if err := fr.Send(wire.OpError, f.RequestID, &wire.ErrorBody{Code: wire.CodeBadRequest, Message: "not a replication op"}); err != nil {
				return err
			}
		}
	}
}

// answer sends a request's answer: body as op, or ERROR 400 with failed's
// text when it is not nil.
func answer(fr *frames, id uint64, op wire.Op, body wire.Encoder, failed error) error {
	if failed != nil {
		return fr.Send(wire.OpError, id, &wire.ErrorBody{Code: wire.CodeBadRequest, Message: failed.Error()})
	}
	return fr.Send(op, id, body)
}
