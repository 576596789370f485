package consul

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/fibrilgo/fibril/core"
)

// Tags of a broker's catalog entry. Only public brokers carry TagPublic,
// so `health/service/<name>?tag=public&passing` and the DNS name
// public.<name>.service.consul return only addresses clients may use.
const (
	TagPublic  = "public"
	TagPrivate = "private"
)

// Service is a broker's entry in the Consul catalog.
type Service struct {
	// Name is the service name (consul.service_name).
	Name string
	// NodeID is the broker's node id; the service id is Name-NodeID.
	NodeID string
	// Private brokers are registered with TagPrivate instead of TagPublic.
	Private bool
	// Address and Port are the client listener's advertised (public) or
	// bound (private) address. An unspecified host (0.0.0.0, ::) is left
	// empty, and Consul uses its agent's node address.
	Address string
	Port    int
	// CheckURL is the broker's /readyz; TLS checks skip verification
	// (see coordination/consul/README.md#service-registration).
	CheckURL string
	// CheckInterval and DeregisterAfter tune the HTTP check.
	CheckInterval   time.Duration
	DeregisterAfter time.Duration
}

// ID is the service id in the agent (one per broker).
func (s Service) ID() string { return s.Name + "-" + s.NodeID }

func (s Service) registration() *api.AgentServiceRegistration {
	tag, vis := TagPublic, "public"
	if s.Private {
		tag, vis = TagPrivate, "private"
	}
	addr := s.Address
	if ip := net.ParseIP(strings.Trim(addr, "[]")); ip != nil && ip.IsUnspecified() {
		addr = ""
	}
	return &api.AgentServiceRegistration{
		ID: s.ID(), Name: s.Name, Address: addr, Port: s.Port,
		Tags: []string{tag, "node=" + s.NodeID},
		Meta: map[string]string{"node_id": s.NodeID, "visibility": vis},
		Check: &api.AgentServiceCheck{
			Name:                           "fibril readiness (" + s.NodeID + ")",
			HTTP:                           s.CheckURL,
			Method:                         "GET",
			Interval:                       s.CheckInterval.String(),
			Timeout:                        min(s.CheckInterval, 5*time.Second).String(),
			TLSSkipVerify:                  strings.HasPrefix(s.CheckURL, "https://"),
			DeregisterCriticalServiceAfter: s.DeregisterAfter.String(),
		},
	}
}

// Registration keeps a broker registered: it registers again when the
// agent forgets the service (an agent restarted without its data), and
// deregisters on Close.
type Registration struct {
	s       Service
	clients []*api.Client
	addrs   []string
	log     interface {
		Info(string, ...any)
		Warn(string, ...any)
	}

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// keepEvery is how often the registration checks that the agent still
// has the service (one cheap local read; the agent does not forward it).
const keepEvery = 30 * time.Second

// Register registers s with the agents of o (the first that answers).
// A token without the right to register fails at once, naming the right;
// an agent that does not answer within ctx is retried in the background.
func Register(ctx context.Context, o Options, s Service) (*Registration, error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	r := &Registration{s: s, addrs: o.Addresses, log: o.Logger, stop: make(chan struct{}), done: make(chan struct{})}
	var err error
	if r.clients, _, err = o.clients(); err != nil {
		return nil, err
	}
	err = r.register(ctx)
	switch {
	case errors.Is(err, core.ErrForbidden):
		return nil, fmt.Errorf("consul.register: the ACL token (%s or %s) lacks the right service %q { policy = \"write\" }: %w", KeyToken, KeyTokenPath, s.Name, err)
	case err != nil:
		r.log.Warn("consul: could not register the service yet; retrying", "service", s.ID(), "err", err)
	default:
		r.log.Info("consul: registered", "service", s.ID(), "tag", r.s.registration().Tags[0], "check", s.CheckURL)
	}
	go r.keep()
	return r, nil
}

// register tries each agent in turn.
func (r *Registration) register(ctx context.Context) error {
	var last error
	for i, cl := range r.clients {
		err := cl.Agent().ServiceRegisterOpts(r.s.registration(), api.ServiceRegisterOpts{ReplaceExistingChecks: true}.WithContext(ctx))
		if err == nil {
			return nil
		}
		last = fmt.Errorf("agent %s: %w", r.addrs[i], err)
		if aclDenied(err) {
			return core.Errorf(core.ErrForbidden, "%v", last)
		}
	}
	return last
}

// keep registers the service again whenever the agent does not have it.
func (r *Registration) keep() {
	defer close(r.done)
	t := time.NewTicker(keepEvery)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), keepEvery/2)
		if !r.present(ctx) {
			if err := r.register(ctx); err != nil {
				r.log.Warn("consul: could not register the service; retrying", "service", r.s.ID(), "err", err)
			} else {
				r.log.Info("consul: registered the service again (the agent had lost it)", "service", r.s.ID())
			}
		}
		cancel()
	}
}

func (r *Registration) present(ctx context.Context) bool {
	for _, cl := range r.clients {
		svc, _, err := cl.Agent().Service(r.s.ID(), (&api.QueryOptions{}).WithContext(ctx))
		if err == nil && svc != nil {
			return true
		}
	}
	return false
}

// Close stops keeping the registration and deregisters the service, so an
// orderly shutdown leaves the catalog at once.
func (r *Registration) Close(ctx context.Context) error {
	var err error
	r.once.Do(func() {
		close(r.stop)
		<-r.done
		for _, cl := range r.clients {
			if err = cl.Agent().ServiceDeregisterOpts(r.s.ID(), (&api.QueryOptions{}).WithContext(ctx)); err == nil {
				r.log.Info("consul: deregistered", "service", r.s.ID())
				return
			}
		}
	})
	return err
}
