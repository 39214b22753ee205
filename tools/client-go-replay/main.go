// Command client-go-replay runs client-go v0.26.15's EventCorrelator (tools/record) over a stream,
// as `eventpipe replay` runs eventpipe's: the yardstick of docs/performance.md.
//
// Input, one JSON document per line: a replay line {"clock","event"[,"spam_filter_clock"]}, or a
// bare core/v1 Event, whose clock is its own time (lastTimestamp, else eventTime, else
// firstTimestamp), as `eventpipe run --clock event` reads it. Output, one line per input line:
// {"skip","event","patch"}, client-go's EventCorrelateResult; after each result that is not
// skipped, UpdateState is called with its event, as recordToSink does after a successful write.
//
//	client-go-replay < in.jsonl > out.jsonl      # end to end: read, decode, correlate, write
//	client-go-replay -bench 5 < in.jsonl         # in process: decode everything, then time
//	                                             # 5 passes of the correlating loop alone
//
// The correlator options take the flags of `eventpipe replay` (--lru-cache-size, --burst, --qps,
// --max-events, --max-interval-seconds; 0 means client-go's default), and --no-update-state
// models a sink that never succeeds (UpdateState is never called).
//
// It builds offline from the vendored client-go of the shared material: see build.sh.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
)

// line is one input document.
type line struct {
	Clock           *time.Time `json:"clock"`
	SpamFilterClock *time.Time `json:"spam_filter_clock"`
	Event           *v1.Event  `json:"event"`
}

// clocks hands out the instants set for one line in the order client-go reads them: the
// EventAggregator first, then the SpamFilter's token bucket. Further reads get the last one.
type clocks struct {
	queue []time.Time
	last  time.Time
}

func (c *clocks) Now() time.Time {
	if len(c.queue) > 0 {
		c.last = c.queue[0]
		c.queue = c.queue[1:]
	}
	return c.last
}

func (c *clocks) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *clocks) set(l *line) {
	spam := *l.Clock
	if l.SpamFilterClock != nil {
		spam = *l.SpamFilterClock
	}
	c.queue = append(c.queue[:0], *l.Clock, spam)
}

func decode(raw []byte) (*line, error) {
	var l line
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, err
	}
	if l.Event == nil {
		var e v1.Event
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, err
		}
		l.Event = &e
	}
	if l.Clock == nil {
		t := l.Event.LastTimestamp.Time
		if t.IsZero() {
			t = l.Event.EventTime.Time
		}
		if t.IsZero() {
			t = l.Event.FirstTimestamp.Time
		}
		l.Clock = &t
	}
	return &l, nil
}

type result struct {
	Skip  bool            `json:"skip"`
	Event *v1.Event       `json:"event"`
	Patch json.RawMessage `json:"patch"`
}

// options are the correlator options set by flags; Clock is set per correlator.
var (
	options       record.CorrelatorOptions
	noUpdateState bool
)

func correlator(c *clocks) *record.EventCorrelator {
	o := options
	o.Clock = c
	return record.NewEventCorrelatorWithOptions(o)
}

func main() {
	passes := flag.Int("bench", 0, "decode the whole input, then time this many passes of the correlating loop (fresh correlator each) and print ns/event")
	flag.IntVar(&options.LRUCacheSize, "lru-cache-size", 0, "LRU cache size of the aggregator and the spam filter (0: 4096)")
	flag.IntVar(&options.BurstSize, "burst", 0, "the spam filter's token bucket burst (0: 25)")
	qps := flag.Float64("qps", 0, "the spam filter's token bucket refill rate per second (0: 1/300)")
	flag.IntVar(&options.MaxEvents, "max-events", 0, "similar events in an interval before aggregation (0: 10)")
	flag.IntVar(&options.MaxIntervalInSeconds, "max-interval-seconds", 0, "the aggregation interval in seconds (0: 600)")
	flag.BoolVar(&noUpdateState, "no-update-state", false, "never call UpdateState (a sink that never succeeds)")
	flag.Parse()
	options.QPS = float32(*qps)
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	c := &clocks{}
	if *passes > 0 {
		bench(in, c, *passes)
		return
	}
	corr := correlator(c)
	out := bufio.NewWriterSize(os.Stdout, 1<<20)
	defer out.Flush()
	enc := json.NewEncoder(out)
	for n := 1; ; n++ {
		raw, err := in.ReadBytes('\n')
		if len(raw) > 0 {
			l, derr := decode(raw)
			if derr != nil {
				fmt.Fprintf(os.Stderr, "line %d: %v\n", n, derr)
				os.Exit(2)
			}
			c.set(l)
			r, cerr := corr.EventCorrelate(l.Event)
			if cerr != nil {
				fmt.Fprintf(os.Stderr, "line %d: %v\n", n, cerr)
				os.Exit(2)
			}
			res := result{Skip: r.Skip, Event: r.Event}
			if len(r.Patch) > 0 {
				res.Patch = r.Patch
			}
			if !r.Skip && !noUpdateState {
				corr.UpdateState(r.Event)
			}
			if err := enc.Encode(&res); err != nil {
				panic(err)
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			panic(err)
		}
	}
}

func bench(in *bufio.Reader, c *clocks, passes int) {
	var lines []*line
	for {
		raw, err := in.ReadBytes('\n')
		if len(raw) > 0 {
			l, derr := decode(raw)
			if derr != nil {
				panic(derr)
			}
			lines = append(lines, l)
		}
		if err != nil {
			break
		}
	}
	var ns []float64
	for p := 0; p < passes; p++ {
		// Each pass correlates copies, as the events a pass hands over are its own.
		events := make([]*v1.Event, len(lines))
		for i, l := range lines {
			events[i] = l.Event.DeepCopy()
		}
		corr := correlator(c)
		start := time.Now()
		for i, l := range lines {
			c.set(l)
			r, err := corr.EventCorrelate(events[i])
			if err != nil {
				panic(err)
			}
			if !r.Skip && !noUpdateState {
				corr.UpdateState(r.Event)
			}
		}
		ns = append(ns, float64(time.Since(start).Nanoseconds())/float64(len(lines)))
	}
	sort.Float64s(ns)
	fmt.Printf("%d events, %d pass(es): client-go v0.26.15 EventCorrelator %.0f ns/event median (min %.0f, max %.0f)\n",
		len(lines), passes, ns[len(ns)/2], ns[0], ns[len(ns)-1])
}
