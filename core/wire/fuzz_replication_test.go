package wire

import "testing"

// Fuzz targets for the replication bodies (docs/protocol.md#replication-ops),
// with the round-trip property of fuzzBody. Seeds are the round-trip
// samples of replication_test.go for the body's type.

func replicationSeeds[T any, P bodyPtr[T]]() []Encoder {
	var seeds []Encoder
	for _, c := range replicationCases() {
		if b, ok := c.body.(P); ok {
			seeds = append(seeds, b)
		}
	}
	return seeds
}

func FuzzReplicationRead(f *testing.F) {
	fuzzBody[ReplicationRead](f, replicationSeeds[ReplicationRead]()...)
}

func FuzzReplicationReadOK(f *testing.F) {
	fuzzBody[ReplicationReadOK](f, replicationSeeds[ReplicationReadOK]()...)
}

func FuzzReplicationApply(f *testing.F) {
	fuzzBody[ReplicationApply](f, replicationSeeds[ReplicationApply]()...)
}

func FuzzReplicationApplyOK(f *testing.F) {
	fuzzBody[ReplicationApplyOK](f, replicationSeeds[ReplicationApplyOK]()...)
}

func FuzzReplicationCheckpointExport(f *testing.F) {
	fuzzBody[ReplicationCheckpointExport](f, replicationSeeds[ReplicationCheckpointExport]()...)
}

func FuzzReplicationCheckpointExportOK(f *testing.F) {
	fuzzBody[ReplicationCheckpointExportOK](f, replicationSeeds[ReplicationCheckpointExportOK]()...)
}

func FuzzReplicationCheckpointInstall(f *testing.F) {
	fuzzBody[ReplicationCheckpointInstall](f, replicationSeeds[ReplicationCheckpointInstall]()...)
}

func FuzzReplicationCheckpointInstallOK(f *testing.F) {
	fuzzBody[ReplicationCheckpointInstallOK](f, replicationSeeds[ReplicationCheckpointInstallOK]()...)
}

func FuzzReplicationStreamStart(f *testing.F) {
	fuzzBody[ReplicationStreamStart](f, replicationSeeds[ReplicationStreamStart]()...)
}

func FuzzReplicationStreamBatch(f *testing.F) {
	fuzzBody[ReplicationStreamBatch](f, replicationSeeds[ReplicationStreamBatch]()...)
}

func FuzzReplicationStreamProgress(f *testing.F) {
	fuzzBody[ReplicationStreamProgress](f, replicationSeeds[ReplicationStreamProgress]()...)
}

func FuzzReplicationStreamReset(f *testing.F) {
	fuzzBody[ReplicationStreamReset](f, replicationSeeds[ReplicationStreamReset]()...)
}

// REPLICATION_STREAM_STOP (op 97) is Empty, covered by FuzzEmpty.

func FuzzReplicationStreamEnd(f *testing.F) {
	fuzzBody[ReplicationStreamEnd](f, replicationSeeds[ReplicationStreamEnd]()...)
}

func FuzzStreamReplicationRead(f *testing.F) {
	// A present group, which this op rejects, as an extra seed.
	f.Add((&ReplicationRead{ReadRequest{Key: QueueKey{Topic: "s", Group: Some("g")}}}).AppendTo(nil))
	fuzzBody[StreamReplicationRead](f, replicationSeeds[StreamReplicationRead]()...)
}

func FuzzStreamReplicationReadOK(f *testing.F) {
	fuzzBody[StreamReplicationReadOK](f, replicationSeeds[StreamReplicationReadOK]()...)
}
