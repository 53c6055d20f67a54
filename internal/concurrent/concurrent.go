// Package concurrent runs a fixed number of calls concurrently: the ranks of
// a job in one process, the modules of a build.
package concurrent

import "sync"

// Each runs f(0), ..., f(n-1), each on its own goroutine, and returns once
// all have returned, with errs[i] the error of f(i).
func Each(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errs
}
