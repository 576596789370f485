package tcp

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fibrilgo/fibril/transport/internal/streammetrics"
)

// transportLabel is the transport label of this transport's series.
const transportLabel = "tcp"

// newMetrics creates the stream series (streammetrics), registered with
// reg when it is not nil.
func newMetrics(reg prometheus.Registerer) (*streammetrics.Streams, error) {
	return streammetrics.New(reg, transportLabel)
}
