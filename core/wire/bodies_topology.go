package wire

// Routing bodies: TOPOLOGY, TOPOLOGY_OK, TOPOLOGY_UPDATE,
// TOPOLOGY_UPDATE_ACK and REDIRECT (docs/protocol.md#endpoints,
// docs/protocol.md#topology, docs/protocol.md#redirect).

const (
	magicTopology          = "FTP1"
	magicTopologyOK        = "FTO1"
	magicTopologyUpdate    = "FTU1"
	magicTopologyUpdateAck = "FTA1"
	magicRedirect          = "FRD1"
)

// Minimum wire sizes of list elements, used to bound counts before
// allocating.
const (
	minAddressSize     = 4 + 2 + 4             // host, port, tags count
	minQueueEntrySize  = 4 + 4 + 1 + 4 + 8 + 4 // topic, partition, group tag, owners, version, count
	minStreamEntrySize = 4 + 4 + 4 + 8 + 4     // topic, partition, owners, version, count
)

func appendEndpoints(b []byte, eps []AdvertisedAddress) []byte {
	b = appendLen(b, len(eps))
	for i := range eps {
		b = appendStr(b, eps[i].Host)
		b = appendU16(b, eps[i].Port)
		b = appendStrList(b, eps[i].Tags)
	}
	return b
}

// endpoints reads an endpoint list (docs/protocol.md#endpoints) into eps, reusing its capacity and
// that of each element's Tags.
func (r *reader) endpoints(field string, eps []AdvertisedAddress) []AdvertisedAddress {
	eps = resize(eps, r.count(field, minAddressSize))
	for i := range eps {
		eps[i].Host = r.str(field)
		eps[i].Port = r.u16(field)
		eps[i].Tags = r.strList(field, eps[i].Tags)
	}
	return eps
}

// TopologyRequest is the TOPOLOGY request body (op 90, docs/protocol.md#topology).
// Both fields absent asks for the whole topology.
type TopologyRequest struct {
	Topic Option[string]
	Group Option[string] // narrows queue entries when Topic is present
}

// AppendTo appends the FTP1 body.
func (t *TopologyRequest) AppendTo(b []byte) []byte {
	b = append(b, magicTopology...)
	b = appendOptStr(b, t.Topic)
	return appendOptStr(b, t.Group)
}

// Decode parses an FTP1 body.
func (t *TopologyRequest) Decode(b []byte) error {
	var r reader
	r.begin(b, OpTopology)
	for r.next() {
		r.magic(magicTopology)
		t.Topic = r.optStr("topic")
		t.Group = r.optStr("group")
		r.end()
	}
	return r.result()
}

// QueueEntry is one queue partition in a topology.
type QueueEntry struct {
	Topic               string
	Partition           uint32
	Group               Option[string]
	Owners              []AdvertisedAddress // priority order; empty = unknown
	PartitioningVersion uint64
	PartitionCount      uint32 // total partitions of the queue
}

// StreamEntry is one stream partition in a topology; streams have
// no group.
type StreamEntry struct {
	Topic               string
	Partition           uint32
	Owners              []AdvertisedAddress
	PartitioningVersion uint64
	PartitionCount      uint32
}

// Topology is the TopologyBody shared byte for byte (after the magic)
// by TOPOLOGY_OK and TOPOLOGY_UPDATE.
type Topology struct {
	Generation uint64 // cluster-wide coordination generation
	Queues     []QueueEntry
	Streams    []StreamEntry
}

func (t *Topology) appendFields(b []byte) []byte {
	b = appendU64(b, t.Generation)
	b = appendLen(b, len(t.Queues))
	for i := range t.Queues {
		q := &t.Queues[i]
		b = appendStr(b, q.Topic)
		b = appendU32(b, q.Partition)
		b = appendOptStr(b, q.Group)
		b = appendEndpoints(b, q.Owners)
		b = appendU64(b, q.PartitioningVersion)
		b = appendU32(b, q.PartitionCount)
	}
	b = appendLen(b, len(t.Streams))
	for i := range t.Streams {
		s := &t.Streams[i]
		b = appendStr(b, s.Topic)
		b = appendU32(b, s.Partition)
		b = appendEndpoints(b, s.Owners)
		b = appendU64(b, s.PartitioningVersion)
		b = appendU32(b, s.PartitionCount)
	}
	return b
}

func (t *Topology) readFields(r *reader) {
	t.Generation = r.u64("generation")
	t.Queues = resize(t.Queues, r.count("queues", minQueueEntrySize))
	for i := range t.Queues {
		q := &t.Queues[i]
		q.Topic = r.str("queues.topic")
		q.Partition = r.u32("queues.partition")
		q.Group = r.optStr("queues.group")
		q.Owners = r.endpoints("queues.owners", q.Owners)
		q.PartitioningVersion = r.u64("queues.partitioning_version")
		q.PartitionCount = r.u32("queues.partition_count")
	}
	t.Streams = resize(t.Streams, r.count("streams", minStreamEntrySize))
	for i := range t.Streams {
		s := &t.Streams[i]
		s.Topic = r.str("streams.topic")
		s.Partition = r.u32("streams.partition")
		s.Owners = r.endpoints("streams.owners", s.Owners)
		s.PartitioningVersion = r.u64("streams.partitioning_version")
		s.PartitionCount = r.u32("streams.partition_count")
	}
}

func decodeTopology(t *Topology, b []byte, op Op, magic string) error {
	var r reader
	r.begin(b, op)
	for r.next() {
		r.magic(magic)
		t.readFields(&r)
		r.end()
	}
	return r.result()
}

// TopologyOK is the TOPOLOGY_OK reply (op 91, magic FTO1).
type TopologyOK struct{ Topology }

// AppendTo appends the FTO1 body.
func (t *TopologyOK) AppendTo(b []byte) []byte {
	return t.appendFields(append(b, magicTopologyOK...))
}

// Decode parses an FTO1 body.
func (t *TopologyOK) Decode(b []byte) error {
	return decodeTopology(&t.Topology, b, OpTopologyOK, magicTopologyOK)
}

// TopologyUpdate is the TOPOLOGY_UPDATE push (op 101, magic FTU1,
// docs/protocol.md#topology): a full snapshot, answered by TOPOLOGY_UPDATE_ACK.
type TopologyUpdate struct{ Topology }

// AppendTo appends the FTU1 body.
func (t *TopologyUpdate) AppendTo(b []byte) []byte {
	return t.appendFields(append(b, magicTopologyUpdate...))
}

// Decode parses an FTU1 body.
func (t *TopologyUpdate) Decode(b []byte) error {
	return decodeTopology(&t.Topology, b, OpTopologyUpdate, magicTopologyUpdate)
}

// TopologyUpdateAck is the TOPOLOGY_UPDATE_ACK body (op 102).
type TopologyUpdateAck struct {
	Generation uint64 // generation the client's routing cache now reflects
}

// AppendTo appends the FTA1 body.
func (t *TopologyUpdateAck) AppendTo(b []byte) []byte {
	return appendU64(append(b, magicTopologyUpdateAck...), t.Generation)
}

// Decode parses an FTA1 body.
func (t *TopologyUpdateAck) Decode(b []byte) error {
	var r reader
	r.begin(b, OpTopologyUpdateAck)
	for r.next() {
		r.magic(magicTopologyUpdateAck)
		t.Generation = r.u64("generation")
		r.end()
	}
	return r.result()
}

// Redirect is the REDIRECT reply (op 92, docs/protocol.md#redirect): retry the request at
// Owners, under PartitioningVersion.
type Redirect struct {
	Topic               string
	Partition           uint32
	Group               Option[string] // absent for streams
	Owners              []AdvertisedAddress
	PartitioningVersion uint64
}

// AppendTo appends the FRD1 body.
func (d *Redirect) AppendTo(b []byte) []byte {
	b = append(b, magicRedirect...)
	b = appendStr(b, d.Topic)
	b = appendU32(b, d.Partition)
	b = appendOptStr(b, d.Group)
	b = appendEndpoints(b, d.Owners)
	return appendU64(b, d.PartitioningVersion)
}

// Decode parses an FRD1 body.
func (d *Redirect) Decode(b []byte) error {
	var r reader
	r.begin(b, OpRedirect)
	for r.next() {
		r.magic(magicRedirect)
		d.Topic = r.str("topic")
		d.Partition = r.u32("partition")
		d.Group = r.optStr("group")
		d.Owners = r.endpoints("owners", d.Owners)
		d.PartitioningVersion = r.u64("partitioning_version")
		r.end()
	}
	return r.result()
}
