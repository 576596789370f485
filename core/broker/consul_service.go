package broker

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/fibrilgo/fibril/coordination/consul"
	"github.com/fibrilgo/fibril/core"
	"github.com/fibrilgo/fibril/plugins"
)

// registerService registers this broker in the Consul catalog when
// consul.register is on (with any coordination backend, standalone
// included): tag public or private, the client address, and an HTTP check
// on /readyz, so draining and recovering brokers leave the healthy set.
func (b *Broker) registerService() error {
	cfg := b.cfg
	if !cfg.ConsulService.Register {
		return nil
	}
	id := b.nodeID
	if id == "" {
		var err error
		if id, err = loadNodeID(cfg); err != nil {
			return err
		}
	}
	o, err := consul.OptionsFromEnv(plugins.CoordinationEnv{NodeID: id, Config: coordinationConfig(cfg), Logger: b.log.With("component", "consul-service")})
	if err != nil {
		return fmt.Errorf("consul.register: %w", err)
	}
	host, port, err := b.serviceAddress()
	if err != nil {
		return err
	}
	s := consul.Service{
		Name: cfg.ConsulService.ServiceName, NodeID: string(id), Private: cfg.Broker.Visibility == string(core.Private),
		Address: host, Port: port, CheckURL: b.readyzURL(),
		CheckInterval:   time.Duration(cfg.ConsulService.CheckIntervalMS) * time.Millisecond,
		DeregisterAfter: time.Duration(cfg.ConsulService.DeregisterCriticalAfterMS) * time.Millisecond,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.service, err = consul.Register(ctx, o, s)
	return err
}

// serviceAddress is the client address a catalog entry carries: the first
// advertised one for a public broker (broker.advertised, which falls back
// to the bound address), the bound one for a private broker.
func (b *Broker) serviceAddress() (string, int, error) {
	if b.cfg.Broker.Visibility == string(core.Private) {
		a := b.brokerLn.Addr().(*net.TCPAddr)
		return a.IP.String(), a.Port, nil
	}
	adv, err := b.advertised()
	if err != nil {
		return "", 0, err
	}
	return strings.Trim(adv[0].Host, "[]"), int(adv[0].Port), nil
}

// readyzURL is where the Consul agent checks this broker: the advertised
// admin address, else the bound one (an unspecified host becomes
// loopback: the agent usually runs beside the broker).
func (b *Broker) readyzURL() string {
	a := b.adminLn.Addr().String()
	if adv := b.cfg.Admin.Listener.Advertise; len(adv) > 0 {
		a = adv[0]
	}
	if host, port, err := net.SplitHostPort(a); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			a = net.JoinHostPort("127.0.0.1", port)
		}
	}
	scheme := "http"
	if b.tls.AdminConfig() != nil {
		scheme = "https"
	}
	return scheme + "://" + a + "/readyz"
}

// deregisterService leaves the catalog (orderly shutdown).
func (b *Broker) deregisterService() {
	if b.service == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.service.Close(ctx); err != nil {
		b.log.Warn("consul: could not deregister; the agent removes the service once its check stays critical", "err", err)
	}
	b.service = nil
}
