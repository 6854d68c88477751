package server

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"openxet/budget"
	"openxet/limits"
)

// TestAnonymousPacedWriter: with a tenant's request in progress, an
// anonymous answer of N bytes at R bytes per second takes (N-burst)/R of
// the fake clock; with none, no time at all and nothing of the rate; a
// cancelled request stops waiting at once and writes nothing more.
func TestAnonymousPacedWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rateBps, n = 1 << 20, 4<<20 + 1<<20/10
		p := newAnonPacer(rateBps, time.Now)
		write := func(ctx context.Context, n int) (*httptest.ResponseRecorder, time.Duration, error) {
			rec := httptest.NewRecorder()
			start := time.Now()
			got, err := p.wrap(rec, ctx).Write(make([]byte, n))
			if got != rec.Body.Len() {
				t.Fatalf("Write = %d, but the answer holds %d bytes", got, rec.Body.Len())
			}
			return rec, time.Since(start), err
		}
		if _, took, err := write(t.Context(), n); err != nil || took != 0 {
			t.Fatalf("no tenant's request in progress: took %v, %v; want no wait", took, err)
		}
		done := p.tenantStarted()
		if rec, took, err := write(t.Context(), n); err != nil || rec.Body.Len() != n || took != 4*time.Second {
			t.Fatalf("beside a tenant's request: %d bytes in %v of the fake clock, %v; want %d in 4s", rec.Body.Len(), took, err, n)
		}
		if p.waitedSeconds() != 4 {
			t.Errorf("waited %v s, want 4", p.waitedSeconds())
		}

		// Cancelled while waiting: returns the context's error promptly.
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		var rec *httptest.ResponseRecorder
		go func() {
			var err error
			rec, _, err = write(ctx, 1<<20)
			errc <- err
		}()
		time.Sleep(100 * time.Millisecond) // fake clock: inside the bubble
		cancel()
		synctest.Wait()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) || rec.Body.Len() >= 1<<20 {
				t.Fatalf("cancelled Write: %v after %d bytes, want context.Canceled before all", err, rec.Body.Len())
			}
		default:
			t.Fatal("a cancelled Write still waits")
		}
		done()
		time.Sleep(10 * time.Second) // the bucket refills
		if _, took, err := write(t.Context(), n); err != nil || took != 0 {
			t.Fatalf("after the tenant's request ended: took %v, %v; want no wait", took, err)
		}
	})
}

// TestAnonymousPoolBandwidth, through the whole server on a stopped clock:
// while bob's download waits for memory (a tenant's request in progress),
// anonymous downloads of alice's public file are paced to
// limits.anonymous_pool_bytes_per_second, each waiting exactly what the
// rate says for the bytes before it, and still for anonymousPaceLinger
// after bob's request ends; after that they are not paced at all. Every
// answer is whole, bob's included.
func TestAnonymousPoolBandwidth(t *testing.T) {
	const rateBps = 10 * anonymousPaceStep // a burst of exactly one step
	e := anonymousLimitsEnv(t, limits.Anonymous{
		AddressRate: limits.Rate{PerSecond: 1000, Burst: 1000}, AddressMaxInFlight: 4,
		PoolRate: limits.Rate{PerSecond: 1000, Burst: 1000}, PoolMaxInFlight: 8,
	}, time.Minute)
	if anonymousPaceBurst(rateBps) != anonymousPaceStep {
		t.Fatal("the test's rate no longer gives a burst of one step")
	}
	e.srv.anonPace = newAnonPacer(rateBps, func() time.Time { return e.srv.now() })
	file := "/alice/pub/resolve/main/weights.bin"
	size := e.files["pub"].size
	if size >= anonymousPaceStep {
		t.Fatalf("the file is %d bytes: the waits below assume one step per answer", size)
	}
	download := func(step string) {
		t.Helper()
		if r := e.anonFrom("10.0.0.1", "GET", file); r.Status != 200 || int64(len(r.Body)) != size {
			t.Fatalf("%s: %d, %d bytes (%s)", step, r.Status, len(r.Body), r.Body)
		}
	}
	e.clock.Add(anonymousPaceLinger) // since alice's set-up requests
	download("an anonymous download with no tenant working")
	download("a second one")
	if w := e.srv.anonPace.waitedSeconds(); w != 0 {
		t.Fatalf("anonymous answers waited %v s with no tenant's request in progress", w)
	}

	share := e.srv.budget.Stats().TenantBytes
	var held []budget.Reservation
	for i := range 2 { // a credential holds at most half a tenant's share
		res, err := e.srv.budget.Reserve(context.Background(), budget.Key{Credential: "bob holder " + string(rune('a'+i)), Tenant: "bob"}, share/2)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, res)
	}
	bobs := make(chan response, 1)
	go func() { bobs <- e.do("GET", file, e.bobRead, nil) }()
	waitFor(t, "bob's download in progress, waiting for memory", func() bool { return e.srv.budget.Stats().Waiting == 1 })
	if n := e.srv.anonPace.tenants.Load(); n != 1 {
		t.Fatalf("%d tenants' requests counted in progress, want 1 (bob's)", n)
	}
	// The bucket is full (the clock has not moved, nothing was paced): the
	// first answer spends it from the burst, each later one waits for its
	// own bytes at the rate, on the stopped clock the whole debt before it.
	var want float64
	for i := range int64(4) {
		download("an anonymous download beside bob's")
		if debt := i*size + size - anonymousPaceStep; debt > 0 {
			want += float64(debt) / rateBps
		}
	}
	if got := e.srv.anonPace.waitedSeconds(); want == 0 || math.Abs(got-want) > 1e-3 {
		t.Fatalf("anonymous answers beside bob's request waited %.4f s, want %.4f s", got, want)
	}
	for i := range held {
		held[i].Release()
	}
	if r := <-bobs; r.Status != 200 || int64(len(r.Body)) != size || !bytes.Equal(r.Body, e.do("GET", file, e.alice, nil).Body) {
		t.Fatalf("bob's download: %d, %d bytes", r.Status, len(r.Body))
	}
	e.handlers.waitIdle()
	if n := e.srv.anonPace.tenants.Load(); n != 0 {
		t.Fatalf("%d tenants' requests counted in progress after all ended", n)
	}
	// Within anonymousPaceLinger of the end of bob's request (and of
	// alice's), the pacing holds: this answer waits for its bytes too.
	waited := e.srv.anonPace.waitedSeconds()
	download("an anonymous download just after bob's ended")
	if got, debt := e.srv.anonPace.waitedSeconds()-waited, float64(5*size-anonymousPaceStep)/rateBps; math.Abs(got-debt) > 1e-3 {
		t.Fatalf("an anonymous answer within the linger waited %.4f s, want %.4f s", got, debt)
	}
	e.clock.Add(anonymousPaceLinger)
	waited = e.srv.anonPace.waitedSeconds()
	download("an anonymous download after the linger")
	download("another")
	if got := e.srv.anonPace.waitedSeconds(); got != waited {
		t.Errorf("anonymous answers waited %.4f s more with no tenant working", got-waited)
	}
}
