package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// queues ls / describe / purge against the test broker: the table shows
// the counts, --json the API's answer, and purge asks for the topic name
// unless --yes.
func TestQueuesCommand(t *testing.T) {
	topic := fmt.Sprintf("q-%d", time.Now().UnixNano())
	stream := topic + "-events"
	mustOK(t, ctl(t, "", "declare", "--topic", topic, "--partitions", "2", "--max-retries", "4"), "declare")
	mustOK(t, ctl(t, "", "declare", "--stream", "--topic", stream, "--max-records", "100"), "declare stream")
	mustOK(t, ctl(t, "", "publish", "--topic", topic, "--partition", "1", "--count", "3", "m"), "publish")
	mustOK(t, ctl(t, "", "publish", "--topic", stream, "--count", "2", "r"), "publish to the stream")

	r := ctl(t, "", "queues", "ls")
	mustOK(t, r, "queues ls")
	if !strings.Contains(r.stdout, "KIND") || !regexpLine(r.stdout, `^queue\s+`+topic+`\s+-\s+2\s+3\s+0\s+0\s+-\s+0\s`) ||
		!regexpLine(r.stdout, `^stream\s+`+stream+`\s+-\s+1\s+-\s+-\s+-\s+2\s`) {
		t.Fatalf("queues ls:\n%s", r.stdout)
	}
	r = ctl(t, "", "queues", "ls", "--streams", "--json")
	mustOK(t, r, "queues ls --streams --json")
	var ls struct {
		Queues []struct{ Kind, Topic string } `json:"queues"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ls); err != nil {
		t.Fatal(err)
	}
	for _, q := range ls.Queues {
		if q.Kind != "stream" {
			t.Fatalf("--streams listed a %s: %s", q.Kind, r.stdout)
		}
	}
	r = ctl(t, "", "queues", "describe", topic)
	mustOK(t, r, "describe")
	if !strings.Contains(r.stdout, "queue "+topic+": 2 partitions") || !strings.Contains(r.stdout, "max retries 4") ||
		!regexpLine(r.stdout, `^\s+1\s+-\s+3\s+0\s+0\s`) {
		t.Fatalf("describe:\n%s", r.stdout)
	}
	r = ctl(t, "", "queues", "describe", stream)
	mustOK(t, r, "describe stream")
	if !strings.Contains(r.stdout, "retention max 100 records") || !strings.Contains(r.stdout, "[0,2)") {
		t.Fatalf("describe stream:\n%s", r.stdout)
	}
	if r := ctl(t, "", "queues", "describe", "no-such-"+topic); r.code != exitFail || !strings.Contains(r.stderr, "404") {
		t.Fatalf("describe unknown: %+v", r)
	}

	// Not confirmed: nothing happens.
	if r := ctl(t, "wrong\n", "queues", "purge", topic); r.code != exitFail || !strings.Contains(r.stderr, "not confirmed") {
		t.Fatalf("unconfirmed purge: %+v", r)
	}
	r = ctl(t, topic+"\n", "queues", "purge", topic)
	mustOK(t, r, "purge")
	if !strings.Contains(r.stdout, "purged 3 messages") {
		t.Fatalf("purge printed %q", r.stdout)
	}
	if r := ctl(t, "", "queues", "purge", stream, "--yes"); r.code != exitFail || !strings.Contains(r.stderr, "is a stream") {
		t.Fatalf("purge of a stream: %+v", r)
	}
	r = ctl(t, "", "queues", "limit", topic, "--max-messages", "7", "--overflow", "drop_oldest")
	mustOK(t, r, "limit")
	if !strings.Contains(r.stdout, "at most 7 messages per partition, overflow drop_oldest") {
		t.Fatalf("limit printed %q", r.stdout)
	}
	for range 50 { // applied right after the settings change
		if r = ctl(t, "", "queues", "ls", "--json"); strings.Contains(r.stdout, `"max_messages_per_partition": 7`) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(r.stdout, `"max_messages_per_partition": 7`) {
		t.Fatalf("the limit is not in force:\n%s", r.stdout)
	}
	if r := ctl(t, "", "queues", "limit", topic, "--overflow", "spill", "--max-messages", "1"); r.code != exitFail || !strings.Contains(r.stderr, "overflow") {
		t.Fatalf("a bad overflow: %+v", r)
	}
	mustOK(t, ctl(t, "", "queues", "limit", topic, "--remove"), "limit --remove")
	if r := ctl(t, "", "queues", "limit", topic, "--remove"); r.code != exitFail || !strings.Contains(r.stderr, "has no limit") {
		t.Fatalf("removing twice: %+v", r)
	}
	if r := ctl(t, "", "queues", "limit", topic); r.code != exitUsage {
		t.Fatalf("limit without --max-messages or --remove: %+v", r)
	}
	if r := ctl(t, "nope\n", "queues", "delete", stream); r.code != exitFail || !strings.Contains(r.stderr, "not confirmed") {
		t.Fatalf("unconfirmed delete: %+v", r)
	}
	r = ctl(t, "", "queues", "delete", stream, "--yes")
	mustOK(t, r, "delete stream")
	if !strings.Contains(r.stdout, "deleted stream "+stream+": 1 partitions, 2 records") {
		t.Fatalf("delete stream printed %q", r.stdout)
	}
	r = ctl(t, topic+"\n", "queues", "delete", topic)
	mustOK(t, r, "delete queue")
	if !strings.Contains(r.stdout, "deleted queue "+topic+": 2 partitions, 0 messages") {
		t.Fatalf("delete queue printed %q", r.stdout)
	}
	if r := ctl(t, "", "queues", "describe", topic); r.code != exitFail || !strings.Contains(r.stderr, "404") {
		t.Fatalf("describe after delete: %+v", r)
	}
	if r := ctl(t, "", "queues"); r.code != exitUsage {
		t.Fatalf("queues without a subcommand: %+v", r)
	}
}

// regexpLine reports whether some line of out matches re.
func regexpLine(out, re string) bool {
	return regexp.MustCompile(`(?m)` + re).MatchString(out)
}

// queues messages shows a DLQ's dead letters with their origin; queues
// replay sends them back.
func TestQueuesMessagesAndReplay(t *testing.T) {
	topic := fmt.Sprintf("r-%d", time.Now().UnixNano())
	dlq := topic + "-dlq"
	mustOK(t, ctl(t, "", "declare", "--topic", dlq), "declare dlq")
	mustOK(t, ctl(t, "", "declare", "--topic", topic, "--dlq", "named:"+dlq), "declare")
	mustOK(t, ctl(t, "", "publish", "--topic", topic, "--count", "2", "hello"), "publish")
	mustOK(t, ctl(t, "", "consume", "--topic", topic, "--count", "2", "--fail"), "consume --fail")
	var r result
	for range 50 { // the dead letters are copied after the fail
		r = ctl(t, "", "queues", "messages", dlq)
		if strings.Count(r.stdout, "(terminal_nack)") == 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	mustOK(t, r, "messages")
	if strings.Count(r.stdout, topic+"@") != 2 || !strings.Contains(r.stdout, `"hello"`) || !strings.Contains(r.stdout, "next page: --from 2") {
		t.Fatalf("messages:\n%s", r.stdout)
	}
	if r := ctl(t, "", "queues", "replay", dlq); r.code != exitUsage {
		t.Fatalf("replay without --offsets or --all: %+v", r)
	}
	r = ctl(t, "", "queues", "replay", dlq, "--all", "--settle")
	mustOK(t, r, "replay")
	if !strings.Contains(r.stdout, "replayed 2, skipped 0") {
		t.Fatalf("replay printed %q", r.stdout)
	}
	if r := ctl(t, "", "queues", "messages", dlq); strings.Contains(r.stdout, "terminal_nack") {
		t.Fatalf("the DLQ after replay --settle:\n%s", r.stdout)
	}
	r = ctl(t, "", "consume", "--topic", topic, "--count", "2")
	mustOK(t, r, "consume the replayed copies")
}
