package concurrent

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

func TestEach(t *testing.T) {
	var calls atomic.Int32
	errs := Each(5, func(i int) error {
		calls.Add(1)
		if i%2 == 1 {
			return fmt.Errorf("call %d", i)
		}
		return nil
	})
	if calls.Load() != 5 || len(errs) != 5 {
		t.Fatalf("%d calls, %d errors; want 5 and 5", calls.Load(), len(errs))
	}
	for i, err := range errs {
		if want := i%2 == 1; (err != nil) != want || (want && err.Error() != fmt.Sprintf("call %d", i)) {
			t.Errorf("errs[%d] = %v", i, err)
		}
	}
	if errs := Each(0, func(int) error { return errors.New("called") }); len(errs) != 0 {
		t.Errorf("Each(0) = %v, want no errors", errs)
	}
}

// TestEachConcurrent checks that the calls run at once: each waits for
// all the others to have started.
func TestEachConcurrent(t *testing.T) {
	const n = 4
	started := make(chan struct{}, n)
	all := make(chan struct{})
	var count atomic.Int32
	Each(n, func(int) error {
		started <- struct{}{}
		if count.Add(1) == n {
			close(all)
		}
		<-all
		return nil
	})
	if len(started) != n {
		t.Errorf("%d calls started, want %d", len(started), n)
	}
}
