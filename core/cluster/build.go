package cluster

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/core/queue"
)

// encodeAssignment is the stored form of an Assignment: "<epoch> <node>"
// plus " written" once marked, plus " followers=<a>,<b>" when the
// partition has followers, " in_sync=<a>,<b>" and " acks=<n>" when its
// owner recorded an in-sync set (older readers skip tokens they do not
// know). A line of text rather than JSON because a
// snapshot decodes every assignment of the cluster on a full rebuild
// (10,000 partitions in well under the 5 ms budget); node ids hold no
// spaces, commas or '=' (config checks them). An assignment without
// followers encodes to the same bytes as before followers existed, so a
// cluster that keeps one copy writes what earlier versions wrote.
func encodeAssignment(a Assignment) []byte {
	b := strconv.AppendUint(nil, a.Epoch, 10)
	b = append(b, ' ')
	b = append(b, a.Node...)
	if a.Written {
		b = append(b, " written"...)
	}
	b = appendList(b, flagFollowers, a.Followers)
	b = appendList(b, flagInSync, a.InSync)
	if a.Acks > 0 {
		b = append(b, " acks="...)
		b = strconv.AppendInt(b, int64(a.Acks), 10)
	}
	return b
}

// appendList appends " <flag><a>,<b>…" when ids is not empty.
func appendList(b, flag []byte, ids []core.NodeID) []byte {
	for i, f := range ids {
		if i == 0 {
			b = append(b, ' ')
			b = append(b, flag...)
		} else {
			b = append(b, ',')
		}
		b = append(b, f...)
	}
	return b
}

func decodeAssignment(b []byte) (Assignment, bool) { return (*decoder)(nil).assignment(b) }

// decoder decodes many assignments at once (a full rebuild) with few
// allocations: node ids come from a handful of nodes, so each is
// allocated once and shared, and follower lists are cut from one backing
// array (each with its capacity capped, so appending to one never writes
// into the next). A nil decoder allocates per call.
type decoder struct {
	known []core.NodeID          // the first few ids, scanned (faster than hashing)
	ids   map[string]core.NodeID // the rest
	arena []core.NodeID
}

// knownScan is how many ids are found by scanning before the map.
const knownScan = 8

// Separators and flags of the assignment line, allocated once.
var (
	sepSpace      = []byte{' '}
	sepComma      = []byte{','}
	flagFollowers = []byte("followers=")
	flagInSync    = []byte("in_sync=")
	flagAcks      = []byte("acks=")
)

// arenaChunk is how many follower ids one backing array holds.
const arenaChunk = 4096

func newDecoder() *decoder { return &decoder{ids: make(map[string]core.NodeID)} }

func (d *decoder) id(b []byte) core.NodeID {
	if d == nil {
		return core.NodeID(b)
	}
	for _, id := range d.known {
		if string(id) == string(b) {
			return id
		}
	}
	if id, ok := d.ids[string(b)]; ok {
		return id
	}
	id := core.NodeID(b)
	if len(d.known) < knownScan {
		d.known = append(d.known, id)
	} else {
		d.ids[string(id)] = id
	}
	return id
}

func (d *decoder) assignment(b []byte) (Assignment, bool) {
	sp := bytes.IndexByte(b, ' ')
	if sp <= 0 {
		return Assignment{}, false
	}
	epoch, err := strconv.ParseUint(string(b[:sp]), 10, 64)
	if err != nil {
		return Assignment{}, false
	}
	a := Assignment{Epoch: epoch}
	rest := b[sp+1:]
	node, rest, more := bytes.Cut(rest, sepSpace)
	if len(node) == 0 {
		return Assignment{}, false
	}
	a.Node = d.id(node)
	for more {
		var tok []byte
		tok, rest, more = bytes.Cut(rest, sepSpace)
		switch {
		case string(tok) == "written":
			a.Written = true
		case bytes.HasPrefix(tok, flagFollowers):
			if a.Followers = d.list(tok[len(flagFollowers):]); a.Followers == nil {
				return Assignment{}, false
			}
		case bytes.HasPrefix(tok, flagInSync):
			if a.InSync = d.list(tok[len(flagInSync):]); a.InSync == nil {
				return Assignment{}, false
			}
		case bytes.HasPrefix(tok, flagAcks):
			n, err := strconv.Atoi(string(tok[len(flagAcks):]))
			if err != nil || n < 0 {
				return Assignment{}, false
			}
			a.Acks = n
		case len(tok) == 0:
			return Assignment{}, false // a double or trailing space: not ours
		}
	}
	return a, true
}

// list decodes "<a>,<b>…", nil when an id is empty.
func (d *decoder) list(list []byte) []core.NodeID {
	count := bytes.Count(list, sepComma) + 1
	var buf []core.NodeID
	switch {
	case d == nil:
		buf = make([]core.NodeID, 0, count)
	case cap(d.arena)-len(d.arena) < count: // a new chunk; earlier lists keep the old one
		d.arena = make([]core.NodeID, 0, max(arenaChunk, count))
		fallthrough
	default:
		buf = d.arena
	}
	from := len(buf)
	for more := true; more; {
		var f []byte
		f, list, more = bytes.Cut(list, sepComma)
		if len(f) == 0 {
			return nil
		}
		buf = append(buf, d.id(f))
	}
	if d != nil {
		d.arena = buf
	}
	return buf[from:len(buf):len(buf)]
}

// parseAssignRef parses "assign/<topic>/<group|@default>/<n>" without
// allocating for the common case.
func parseAssignRef(k string) (topic, group string, partition uint32, ok bool) {
	rest, found := strings.CutPrefix(k, prefixAssign)
	if !found {
		return "", "", 0, false
	}
	i := strings.IndexByte(rest, '/')
	if i <= 0 {
		return "", "", 0, false
	}
	topic, rest = rest[:i], rest[i+1:]
	j := strings.IndexByte(rest, '/')
	if j <= 0 {
		return "", "", 0, false
	}
	group, rest = rest[:j], rest[j+1:]
	n, err := strconv.ParseUint(rest, 10, 32)
	if err != nil {
		return "", "", 0, false
	}
	return topic, groupOf(group), uint32(n), true
}

// builder turns watch results into snapshots. It keeps the previous state
// so that a change that touches only assignments (placements, written
// marks — the common case) rebuilds only the channels it touches: every
// other Queue and Stream is shared with the previous snapshot.
type builder struct {
	last []core.KV
}

func newBuilder() *builder { return &builder{} }

// build makes the snapshot for the state kvs (sorted by key) at index.
// prev (nil at first) is the previous snapshot of this builder.
func (b *builder) build(prev *Snapshot, kvs []core.KV, index uint64) *Snapshot {
	var s *Snapshot
	if prev != nil && b.last != nil {
		s = b.incremental(prev, kvs, index)
	}
	if s == nil {
		s = full(kvs, index)
	}
	b.last = kvs
	s.routing = s.routingFingerprint()
	switch {
	case prev == nil:
		s.Generation = index
	case prev.routing == s.routing:
		s.Generation = prev.Generation
	default:
		s.Generation = index
	}
	return s
}

// incremental applies the difference between b.last and kvs to prev when
// only assignments changed; nil means "rebuild in full".
func (b *builder) incremental(prev *Snapshot, kvs []core.KV, index uint64) *Snapshot {
	var changed []core.KV // assignment keys added or changed; a removal forces a full build
	old := b.last
	i, j := 0, 0
	for i < len(old) || j < len(kvs) {
		switch {
		case j == len(kvs) || i < len(old) && old[i].Key < kvs[j].Key: // removed
			return nil
		case i == len(old) || kvs[j].Key < old[i].Key: // added
			if !strings.HasPrefix(kvs[j].Key, prefixAssign) {
				return nil
			}
			changed = append(changed, kvs[j])
			j++
		default:
			if old[i].Version != kvs[j].Version {
				if !strings.HasPrefix(kvs[j].Key, prefixAssign) {
					return nil
				}
				changed = append(changed, kvs[j])
			}
			i++
			j++
		}
	}
	s := &Snapshot{Index: index, Members: prev.Members, MemberIDs: prev.MemberIDs, Gateways: prev.Gateways,
		Queues: prev.Queues, Streams: prev.Streams, queues: prev.queues, streams: prev.streams, cohorts: prev.cohorts,
		Tombstones: prev.Tombstones, deleted: prev.deleted}
	if len(changed) == 0 {
		return s
	}
	// Copy-on-write: each channel a change touches is copied once (old →
	// copy); every other channel is shared with prev.
	queues := make(map[*Queue]*Queue)
	streams := make(map[*Stream]*Stream)
	for _, kv := range changed {
		topic, group, n, ok := parseAssignRef(kv.Key)
		a, ok2 := decodeAssignment(kv.Value)
		if !ok || !ok2 {
			continue
		}
		p := Partition{Ref: core.PartitionRef{Topic: topic, Group: group, Partition: n}, Assignment: a, Version: kv.Version}
		if old := prev.queues[queueID{topic, group}]; old != nil {
			if int(n) < len(old.Parts) {
				q := queues[old]
				if q == nil {
					q = &Queue{Info: old.Info, Parts: slices.Clone(old.Parts), Repartition: old.Repartition}
					queues[old] = q
				}
				q.Parts[n] = p
			}
			continue
		}
		if old := prev.streams[topic]; old != nil && group == "" && int(n) < len(old.Parts) {
			st := streams[old]
			if st == nil {
				st = &Stream{Info: old.Info, Parts: slices.Clone(old.Parts)}
				streams[old] = st
			}
			st.Parts[n] = p
		}
	}
	s.Queues = make([]*Queue, len(prev.Queues))
	s.queues = make(map[queueID]*Queue, len(prev.queues))
	for i, q := range prev.Queues {
		if c := queues[q]; c != nil {
			c.fp = c.fingerprint()
			q = c
		}
		s.Queues[i] = q
		s.queues[queueID{q.Info.Topic, q.Info.Group.Value}] = q
	}
	s.Streams = make([]*Stream, len(prev.Streams))
	s.streams = make(map[string]*Stream, len(prev.streams))
	for i, st := range prev.Streams {
		if c := streams[st]; c != nil {
			c.fp = c.fingerprint()
			st = c
		}
		s.Streams[i] = st
		s.streams[st.Info.Topic] = st
	}
	return s
}

// full builds a snapshot from scratch: members and the catalog first,
// then every assignment into its channel. A value that does not decode is
// skipped; it never stops the rest of the snapshot.
func full(kvs []core.KV, index uint64) *Snapshot {
	s := &Snapshot{
		Index:   index,
		Members: make(map[core.NodeID]*Member),
		queues:  make(map[queueID]*Queue),
		streams: make(map[string]*Stream),
	}
	var markers map[queueID]*Repartition
	for _, kv := range kvs {
		switch {
		case strings.HasPrefix(kv.Key, prefixMembers), strings.HasPrefix(kv.Key, prefixNodes):
			var n core.NodeInfo
			if json.Unmarshal(kv.Value, &n) != nil || n.ID == "" {
				continue
			}
			m := s.Members[n.ID]
			if m == nil {
				m = &Member{}
				s.Members[n.ID] = m
			}
			if strings.HasPrefix(kv.Key, prefixNodes) {
				m.Info, m.Live = n, true
			} else if !m.Live {
				m.Info = n
			}
		case strings.HasPrefix(kv.Key, prefixQueues):
			info, err := queue.DecodeQueueInfo(kv.Value)
			if err != nil {
				continue
			}
			q := &Queue{Info: info, Parts: make([]Partition, info.PartitionCount)}
			for i := range q.Parts {
				q.Parts[i].Ref = core.PartitionRef{Topic: info.Topic, Group: info.Group.Value, Partition: uint32(i)}
			}
			s.queues[queueID{info.Topic, info.Group.Value}] = q
			s.Queues = append(s.Queues, q)
		case strings.HasPrefix(kv.Key, prefixRepartition):
			topic, group, ok := parseRepartitionKey(kv.Key)
			r, ok2 := decodeRepartition(kv.Value, kv.Version)
			if !ok || !ok2 || r.Topic != topic || r.Group != group {
				continue
			}
			if markers == nil {
				markers = make(map[queueID]*Repartition)
			}
			markers[queueID{topic, group}] = r
		case strings.HasPrefix(kv.Key, prefixCohorts):
			ref, ok := parseCohortKey(kv.Key)
			plan, ok2 := decodePlan(kv.Value, kv.Version)
			if !ok || !ok2 {
				continue
			}
			if s.cohorts == nil {
				s.cohorts = make(map[CohortRef]*CohortPlan)
			}
			s.cohorts[ref] = plan
		case strings.HasPrefix(kv.Key, prefixDeleted):
			t, ok := decodeTombstone(kv.Value, kv.Version)
			if !ok {
				continue
			}
			if s.deleted == nil {
				s.deleted = make(map[string]*Tombstone)
			}
			s.deleted[kv.Key] = t
			s.Tombstones = append(s.Tombstones, t)
		case strings.HasPrefix(kv.Key, prefixStreams):
			info, err := queue.DecodeStreamInfo(kv.Value)
			if err != nil {
				continue
			}
			st := &Stream{Info: info, Parts: make([]Partition, info.PartitionCount)}
			for i := range st.Parts {
				st.Parts[i].Ref = core.PartitionRef{Topic: info.Topic, Partition: uint32(i)}
			}
			s.streams[info.Topic] = st
			s.Streams = append(s.Streams, st)
		}
	}
	s.attachRepartitions(markers)
	s.dropDeleted()
	dec := newDecoder()
	for _, kv := range kvs {
		if !strings.HasPrefix(kv.Key, prefixAssign) {
			continue
		}
		topic, group, n, ok := parseAssignRef(kv.Key)
		a, ok2 := dec.assignment(kv.Value)
		if !ok || !ok2 {
			continue
		}
		var parts []Partition
		if q := s.queues[queueID{topic, group}]; q != nil {
			parts = q.Parts
		} else if st := s.streams[topic]; st != nil && group == "" {
			parts = st.Parts
		}
		if int(n) < len(parts) {
			parts[n].Assignment, parts[n].Version = a, kv.Version
		}
	}
	for id := range s.Members {
		s.MemberIDs = append(s.MemberIDs, id)
	}
	slices.Sort(s.MemberIDs)
	for _, id := range s.MemberIDs {
		if m := s.Members[id]; m.Live && m.Info.Visibility() == core.Public && !m.Info.Draining() && len(m.Info.Advertise()) > 0 {
			s.Gateways = append(s.Gateways, id)
		}
	}
	for _, q := range s.Queues {
		q.fp = q.fingerprint()
	}
	for _, st := range s.Streams {
		st.fp = st.fingerprint()
	}
	return s
}

// dropDeleted leaves the queues and streams being deleted out of the
// view: for routing, placement and replication they are gone.
func (s *Snapshot) dropDeleted() {
	if len(s.deleted) == 0 {
		return
	}
	s.Queues = slices.DeleteFunc(s.Queues, func(q *Queue) bool {
		if t := s.Tombstone("queue", q.Info.Topic, q.Info.Group.Value); t == nil || t.Finished {
			return false
		}
		delete(s.queues, queueID{q.Info.Topic, q.Info.Group.Value})
		return true
	})
	s.Streams = slices.DeleteFunc(s.Streams, func(st *Stream) bool {
		if t := s.Tombstone("stream", st.Info.Topic, ""); t == nil || t.Finished {
			return false
		}
		delete(s.streams, st.Info.Topic)
		return true
	})
}

// fingerprints hash what a client's routing depends on: every partition's
// owner, each channel's count and partitioning version, and every
// member's liveness, advertised endpoints, visibility and draining flag.
// Two snapshots with the same fingerprint route every client the same way
// (S-119), so the topology generation moves only when it does. The epoch
// is left out: it also moves when only the followers change (S-134),
// which clients never see, and an owner change changes the owner anyway.
type fpHash struct {
	h   interface{ Write([]byte) (int, error) }
	buf [8]byte
}

func (f *fpHash) num(v uint64) {
	binary.BigEndian.PutUint64(f.buf[:], v)
	f.h.Write(f.buf[:])
}

func (f *fpHash) str(v string) {
	f.h.Write([]byte(v))
	f.h.Write([]byte{0})
}

func partsFingerprint(f *fpHash, parts []Partition) {
	for _, p := range parts {
		f.str(string(p.Node))
	}
}

func (q *Queue) fingerprint() uint64 {
	h := fnv.New64a()
	f := &fpHash{h: h}
	f.str(q.Info.Topic)
	f.str(q.Info.Group.Value)
	f.num(uint64(q.Info.PartitionCount))
	f.num(q.Info.PartitioningVersion)
	partsFingerprint(f, q.Parts)
	return h.Sum64()
}

func (st *Stream) fingerprint() uint64 {
	h := fnv.New64a()
	f := &fpHash{h: h}
	f.str(st.Info.Topic)
	f.num(uint64(st.Info.PartitionCount))
	partsFingerprint(f, st.Parts)
	return h.Sum64()
}

func (s *Snapshot) routingFingerprint() uint64 {
	h := fnv.New64a()
	f := &fpHash{h: h}
	for _, id := range s.MemberIDs {
		m := s.Members[id]
		f.str(string(id))
		if m.Live {
			f.str("live")
			f.str(m.Info.Labels[core.LabelAdvertise])
			f.str(m.Info.Labels[core.LabelVisibility])
			f.str(m.Info.Labels[core.LabelDraining])
			f.str(m.Info.Labels[core.LabelPrivateAdvertise])
		}
	}
	for _, q := range s.Queues {
		f.num(q.fp)
	}
	for _, st := range s.Streams {
		f.num(st.fp)
	}
	return h.Sum64()
}

func decodeInto(b []byte, a *Assignment) bool {
	v, ok := decodeAssignment(b)
	if ok {
		*a = v
	}
	return ok
}
