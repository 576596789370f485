package consul_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fibrilgo/fibril/coordination/consul"
	"github.com/fibrilgo/fibril/coordination/consul/consultest"
)

// TLS to the agent: with the CA and a client certificate the backend
// works over HTTPS; without the client certificate the agent refuses it
// and Open fails naming coordination.consul.addresses.
func TestTLSToAgent(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{TLS: true})
	o := consul.Options{NodeID: "n1", Addresses: []string{"https://" + agent.HTTPSAddr}, Prefix: "tls",
		CAFile: agent.TLS.CA, CertFile: agent.TLS.ClientCert, KeyFile: agent.TLS.ClientKey}
	c := open(t, o)
	if _, err := c.CompareAndSet(context.Background(), "k", []byte("v"), 0); err != nil {
		t.Fatalf("write over HTTPS: %v", err)
	}
	if kv, err := c.Get(context.Background(), "k"); err != nil || string(kv.Value) != "v" {
		t.Fatalf("read over HTTPS: %v %v", kv, err)
	}

	o.CertFile, o.KeyFile = "", ""
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := consul.Open(ctx, o)
	if err == nil || !strings.Contains(err.Error(), consul.KeyAddresses) {
		t.Fatalf("Open without a client certificate: %v, want an error naming %s", err, consul.KeyAddresses)
	}
	t.Logf("without a client certificate: %v", err)
}
