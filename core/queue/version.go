package queue

// PartitioningVersion is the partitioning version of the partition's queue
// (docs/protocol.md#topology): it starts at 0 and only a repartition raises it.
// Standalone brokers never repartition (S-20, S-122), so today it is
// always the queue's recorded version, 0; the publish fence compares
// against it so that a coordinated broker only has to record a new value.
func (p *Partition) PartitioningVersion() uint64 { return p.q.info().PartitioningVersion }
