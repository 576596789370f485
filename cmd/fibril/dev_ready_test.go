package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeDevAdmin is a dev broker's admin API: /readyz answers 200 at once,
// and /admin/api/topology shows every node live but names this node the
// placement controller only from its controllerFrom-th answer on (0:
// never).
type fakeDevAdmin struct {
	id             string
	ids            []string
	controllerFrom int64
	topologyReads  atomic.Int64
}

func (f *fakeDevAdmin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/readyz":
		w.WriteHeader(http.StatusOK)
	case "/admin/api/topology":
		n := f.topologyReads.Add(1)
		type node struct {
			ID         string `json:"id"`
			Live       bool   `json:"live"`
			Controller bool   `json:"controller,omitempty"`
		}
		var v struct {
			Nodes []node `json:"nodes"`
		}
		for _, id := range f.ids {
			v.Nodes = append(v.Nodes, node{ID: id, Live: true,
				Controller: id == f.id && f.controllerFrom > 0 && n >= f.controllerFrom})
		}
		_ = json.NewEncoder(w).Encode(v)
	default:
		http.NotFound(w, r)
	}
}

// `fibril dev` says "cluster ready" only when a declaration would be
// placed: every broker being ready (its lease held) is not enough while
// no placement controller has been elected.
func TestDevReadyWaitsForThePlacementController(t *testing.T) {
	ids := []string{"node-1", "node-2", "node-3"}
	var fakes []*fakeDevAdmin
	var cluster []*devNode
	for i, id := range ids {
		f := &fakeDevAdmin{id: id, ids: ids}
		if i == 1 {
			f.controllerFrom = 4 // elected after a few polls
		}
		srv := httptest.NewServer(f)
		t.Cleanup(srv.Close)
		fakes = append(fakes, f)
		cluster = append(cluster, &devNode{id: id, admin: strings.TrimPrefix(srv.URL, "http://"), exited: make(chan struct{})})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitDevReady(ctx, cluster); err != nil {
		t.Fatal(err)
	}
	if n := fakes[1].topologyReads.Load(); n < fakes[1].controllerFrom {
		t.Fatalf("ready after %d topology reads of the node that becomes controller at read %d", n, fakes[1].controllerFrom)
	}
}

// A cluster that never elects a placement controller is never called
// ready (the wait ends with the caller's context).
func TestDevReadyNeedsAController(t *testing.T) {
	ids := []string{"node-1", "node-2"}
	var cluster []*devNode
	for _, id := range ids {
		srv := httptest.NewServer(&fakeDevAdmin{id: id, ids: ids})
		t.Cleanup(srv.Close)
		cluster = append(cluster, &devNode{id: id, admin: strings.TrimPrefix(srv.URL, "http://"), exited: make(chan struct{})})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := waitDevReady(ctx, cluster); err == nil {
		t.Fatal("ready without a placement controller")
	}
}
