package train

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sort"

	"github.com/parallax-engine/parallax/engine"
	"github.com/parallax-engine/parallax/model"
	"github.com/parallax-engine/parallax/model/safetensors"
	"github.com/parallax-engine/parallax/model/tokenizer"
	"github.com/parallax-engine/parallax/train/data"
	"github.com/parallax-engine/parallax/train/dist"
)

// Data-parallel training: every rank holds the whole model and trains on
// its share of each global batch; gradients are averaged over the ranks
// before the update.
//
//   - Data: Config.Batch is the global micro-batch. Every rank walks the
//     same sampler and reads its own rows of each global batch (rank r rows
//     r*b .. r*b+b-1, b = Batch/ranks), so N ranks see exactly the batches
//     one process would, and the sampler's state (one for the whole job)
//     resumes at any number of ranks.
//   - Gradients: averaged in buckets of about ParallelOptions.BucketBytes
//     (an all-reduce, and a reduce onto owners, each one NCCL group), the
//     parameters taken in the order the
//     backward pass finalises their gradients (model.GradOrder: the last
//     layer first). On the last micro-batch of a step the model's gradient
//     hook starts each bucket's reduction as soon as its gradients are
//     final, so communication overlaps the rest of the backward pass
//     (NCCL: on a second stream; TCP: the exchange on a goroutine);
//     ReduceGrads starts what is left and waits for all of it.
//   - Distributed Muon (docs/MATH.md section 10): the Muon matrices
//     are sorted by size and dealt round-robin to the ranks. A matrix's
//     gradient is reduced onto its owner only, which alone keeps its
//     momentum and runs Newton-Schulz; the owners then broadcast the updated
//     matrices (together, an all-gather of whole matrices). AdamW parameters
//     are all-reduced and updated by every rank, identically.
//   - ZeRO-1 (ParallelOptions.ZeRO): the AdamW parameters get owners too,
//     so each rank keeps the AdamW moments of its share only; their
//     gradients are reduced onto the owners (a reduce-scatter of whole
//     tensors) and the updated parameters broadcast (an all-gather).
//   - Checkpoints are consolidated: rank 0 gathers the optimizer state from
//     the owners and writes the same files one process would, so a run
//     resumes at any number of ranks.

// ParallelOptions modify NewParallelOptimizer.
type ParallelOptions struct {
	ZeRO        bool  // shard the AdamW state over the ranks too (ZeRO-1)
	BucketBytes int64 // gradient bytes per bucket; 0 means DefaultBucketBytes
}

// DefaultBucketBytes is the default gradient bucket: 25 MiB, as PyTorch's
// DistributedDataParallel.
const DefaultBucketBytes = 25 << 20

// optParallel is the data-parallel part of an Optimizer.
type optParallel struct {
	comm   dist.Comm
	rank   int
	zero   bool
	bucket int64
	owner  map[*model.Param]int // the rank that updates the parameter; -1: every rank

	// The gradient buckets, in reduction order, and the reduction of the
	// current step: left[i] counts bucket i's parameters whose gradients
	// the armed backward has not yet finalised; buckets start in index
	// order (next is the first not started), which is the same on every
	// rank whatever the hook's grouping.
	buckets  [][]*model.Param
	bucketOf map[*model.Param]int
	left     []int
	next     int
	armed    bool
	pending  []dist.Pending
}

// NewParallelOptimizer is NewOptimizer for one rank of a data-parallel job
// over comm: it allocates the optimizer state this rank holds. Every rank
// calls it with the same parameters (the same model) and settings.
func NewParallelOptimizer(dev engine.Device, params []*model.Param, cfg OptimConfig, comm dist.Comm, o ParallelOptions) (*Optimizer, error) {
	if comm == nil || comm.Size() == 1 {
		return NewOptimizer(dev, params, cfg)
	}
	if o.BucketBytes <= 0 {
		o.BucketBytes = DefaultBucketBytes
	}
	par := &optParallel{comm: comm, rank: comm.Rank(), zero: o.ZeRO,
		bucket: o.BucketBytes, owner: map[*model.Param]int{}}
	opt, err := newOptimizer(dev, params, cfg, par)
	if err != nil {
		return nil, err
	}
	par.makeBuckets(params)
	return opt, nil
}

// makeBuckets cuts order into consecutive buckets of at most p.bucket
// bytes of gradients (a larger tensor goes alone).
func (p *optParallel) makeBuckets(order []*model.Param) {
	p.buckets, p.bucketOf = nil, map[*model.Param]int{}
	var cur []*model.Param
	size := int64(0)
	for _, q := range order {
		b := int64(q.W.Bytes()) // the gradient's size: both are f32
		if len(cur) > 0 && size+b > p.bucket {
			p.buckets = append(p.buckets, cur)
			cur, size = nil, 0
		}
		p.bucketOf[q] = len(p.buckets)
		cur = append(cur, q)
		size += b
	}
	if len(cur) > 0 {
		p.buckets = append(p.buckets, cur)
	}
	p.left = make([]int, len(p.buckets))
	p.resetReduce()
}

// resetReduce prepares the next step's reduction.
func (p *optParallel) resetReduce() {
	for i, b := range p.buckets {
		p.left[i] = len(b)
	}
	p.next, p.armed, p.pending = 0, false, p.pending[:0]
}

// OverlapBackward makes the gradient reduction overlap m's backward pass
// (m holds this optimizer's parameters): the buckets are re-cut in the
// order in which m.Backward finalises the gradients, and m's gradient hook
// is set to start a bucket's reduction as soon as its gradients are final,
// during a backward pass armed by ArmReduce. A no-op in one process.
func (o *Optimizer) OverlapBackward(m *model.Model) {
	p := o.par
	if p == nil {
		return
	}
	var order []*model.Param
	seen := map[*model.Param]bool{}
	for _, grp := range m.GradOrder() {
		for _, q := range grp {
			if _, ok := p.owner[q]; ok && !seen[q] {
				order = append(order, q)
				seen[q] = true
			}
		}
	}
	// Parameters the model does not list never become final through the
	// hook: they go last, reduced by ReduceGrads.
	for _, q := range o.params {
		if !seen[q] {
			order = append(order, q)
		}
	}
	p.makeBuckets(order)
	m.SetGradHook(p.gradsReady)
}

// ArmReduce makes the next backward pass start the gradient reduction (see
// OverlapBackward): call it before the last micro-batch's Backward of a
// step, since only then are the gradients final. ReduceGrads ends it. A
// no-op in one process.
func (o *Optimizer) ArmReduce() {
	if o.par != nil {
		o.par.resetReduce()
		o.par.armed = true
	}
}

// gradsReady is the model's gradient hook: it starts every bucket, in
// order, whose gradients are all final.
func (p *optParallel) gradsReady(ps []*model.Param) error {
	if !p.armed {
		return nil
	}
	for _, q := range ps {
		if i, ok := p.bucketOf[q]; ok {
			p.left[i]--
		}
	}
	for p.next < len(p.buckets) && p.left[p.next] <= 0 {
		p.start(p.next)
		p.next++
	}
	return nil
}

// start starts bucket i's reduction: the gradients every rank holds are
// all-reduced, the owned ones reduced onto their owners. Errors surface
// when waiting.
func (p *optParallel) start(i int) {
	var all, owned []*engine.Tensor
	var roots []int
	for _, q := range p.buckets[i] {
		if r := p.owner[q]; r < 0 {
			all = append(all, q.G)
		} else {
			owned = append(owned, q.G)
			roots = append(roots, r)
		}
	}
	if len(all) > 0 {
		p.pending = append(p.pending, p.comm.StartAllReduce(dist.Avg, all...))
	}
	if len(owned) > 0 {
		p.pending = append(p.pending, p.comm.StartReduce(dist.Avg, roots, owned...))
	}
}

// assign deals the parameters to their owners: the Muon matrices sorted by
// size (largest first, then in model order) round-robin over the ranks,
// then likewise the AdamW parameters with ZeRO-1 (continuing the deal);
// without it the AdamW parameters are every rank's.
func (p *optParallel) assign(params []*model.Param, cfg OptimConfig) {
	var muon, adam []*model.Param
	for _, q := range params {
		if cfg.usesMuon(q) {
			muon = append(muon, q)
		} else {
			adam = append(adam, q)
			p.owner[q] = -1
		}
	}
	bySize := func(ps []*model.Param) {
		sort.SliceStable(ps, func(i, j int) bool { return ps[i].W.Numel() > ps[j].W.Numel() })
	}
	n := p.comm.Size()
	next := 0
	bySize(muon)
	for _, q := range muon {
		p.owner[q] = next % n
		next++
	}
	if p.zero {
		bySize(adam)
		for _, q := range adam {
			p.owner[q] = next % n
			next++
		}
	}
}

// holds reports whether this rank keeps p's optimizer state.
func (o *Optimizer) holds(p *model.Param) bool {
	if o.par == nil {
		return true
	}
	r := o.par.owner[p]
	return r < 0 || r == o.par.rank
}

// Owner returns the rank that updates p (-1: every rank; always -1 in one
// process).
func (o *Optimizer) Owner(p *model.Param) int {
	if o.par == nil {
		return -1
	}
	return o.par.owner[p]
}

// buckets calls f on consecutive runs of ts (and their roots, if any)
// holding at most limit bytes each (a larger tensor goes alone).
func buckets(ts []*engine.Tensor, roots []int, limit int64, f func(ts []*engine.Tensor, roots []int) error) error {
	start, size := 0, int64(0)
	for i, t := range ts {
		b := int64(t.Bytes())
		if i > start && size+b > limit {
			var rs []int
			if roots != nil {
				rs = roots[start:i]
			}
			if err := f(ts[start:i], rs); err != nil {
				return err
			}
			start, size = i, 0
		}
		size += b
	}
	if start < len(ts) {
		var rs []int
		if roots != nil {
			rs = roots[start:]
		}
		return f(ts[start:], rs)
	}
	return nil
}

// ReduceGrads averages the gradients over the ranks: every rank's
// parameters are all-reduced; an owned parameter's gradient is reduced
// onto its owner only (elsewhere it is undefined afterwards, and nothing
// reads it). It starts the buckets an armed backward pass has not started
// (all of them without one), in order, and waits for every bucket. Every
// rank calls it once per step, before any other collective of the step,
// since the ranks must issue the same collectives in the same order. A
// no-op in one process.
func (o *Optimizer) ReduceGrads() error {
	p := o.par
	if p == nil {
		return nil
	}
	for p.next < len(p.buckets) {
		p.start(p.next)
		p.next++
	}
	var first error
	for _, w := range p.pending {
		// Wait for each even after an error: none must stay in flight.
		if err := w.Wait(); err != nil && first == nil {
			first = err
		}
	}
	p.resetReduce()
	if first != nil {
		return fmt.Errorf("gradient reduction: %w", first)
	}
	return nil
}

// GlobalGradNorm is GradNorm over the reduced gradients of the whole job:
// each rank sums the squares of the gradients it owns (rank 0 also those
// every rank holds) and the sums are added over the ranks, so every rank
// gets the same value. acc is a F32 [1] scratch tensor.
func (o *Optimizer) GlobalGradNorm(acc *engine.Tensor) (float64, error) {
	if o.par == nil {
		return GradNorm(o.dev, o.params, acc)
	}
	var mine []*model.Param
	for _, p := range o.params {
		if r := o.par.owner[p]; r == o.par.rank || (r < 0 && o.par.rank == 0) {
			mine = append(mine, p)
		}
	}
	n, err := GradNorm(o.dev, mine, acc)
	if err != nil {
		return 0, err
	}
	v := []float64{n * n}
	if err := o.par.comm.AllReduceHost(v); err != nil {
		return 0, fmt.Errorf("grad norm: %w", err)
	}
	return math.Sqrt(v[0]), nil
}

// syncParams broadcasts every owned parameter from its owner after the
// update (the end of Step).
func (o *Optimizer) syncParams() error {
	if o.par == nil {
		return nil
	}
	var ts []*engine.Tensor
	var roots []int
	for _, p := range o.params {
		if r := o.par.owner[p]; r >= 0 {
			ts = append(ts, p.W)
			roots = append(roots, r)
		}
	}
	if err := buckets(ts, roots, o.par.bucket, func(ts []*engine.Tensor, rs []int) error {
		return o.par.comm.Broadcast(rs, ts...)
	}); err != nil {
		return fmt.Errorf("parameter broadcast: %w", err)
	}
	return nil
}

// stateShapes lists every state tensor of the optimizer (held here or not)
// with its shape.
func (o *Optimizer) stateShapes() map[string]engine.Shape {
	out := map[string]engine.Shape{}
	for _, s := range o.adam {
		out[s.p.Name+".exp_avg"] = s.p.W.Shape()
		out[s.p.Name+".exp_avg_sq"] = s.p.W.Shape()
	}
	for _, s := range o.muon {
		out[s.p.Name+".momentum"] = s.p.W.Shape()
	}
	return out
}

// gatherState collects every state tensor on rank 0 (every rank calls it):
// the owners broadcast what rank 0 lacks, a bucket at a time. Rank 0 gets
// the tensors sorted by name; the others nil.
func (o *Optimizer) gatherState() ([]safetensors.Tensor, error) {
	type entry struct {
		name  string
		t     *engine.Tensor // held here; nil if not
		owner int
		shape engine.Shape
	}
	var es []entry
	for _, s := range o.adam {
		r := o.par.owner[s.p]
		es = append(es, entry{s.p.Name + ".exp_avg", s.m, r, s.p.W.Shape()}, entry{s.p.Name + ".exp_avg_sq", s.v, r, s.p.W.Shape()})
	}
	for _, s := range o.muon {
		es = append(es, entry{s.p.Name + ".momentum", s.m, o.par.owner[s.p], s.p.W.Shape()})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].name < es[j].name })
	rank0 := o.par.rank == 0
	data := map[string][]byte{}
	read := func(name string, t *engine.Tensor) error {
		b := make([]byte, t.Bytes())
		if err := o.dev.Read(t, b); err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		data[name] = b
		return nil
	}
	// What rank 0 holds it reads; the rest comes from the owners.
	var remote []entry
	for _, e := range es {
		if e.owner > 0 {
			remote = append(remote, e)
		} else if rank0 {
			if err := read(e.name, e.t); err != nil {
				return nil, err
			}
		}
	}
	for start := 0; start < len(remote); {
		var ts []*engine.Tensor
		var roots []int
		var scratch []*engine.Tensor
		size := int64(0)
		end := start
		for ; end < len(remote) && (end == start || size+int64(remote[end].shape.Numel()*4) <= o.par.bucket); end++ {
			e := remote[end]
			t := e.t
			if t == nil {
				var err error
				if t, err = o.dev.Alloc(engine.F32, e.shape...); err != nil {
					return nil, fmt.Errorf("gather optimizer state: %w", err)
				}
				scratch = append(scratch, t)
			}
			ts = append(ts, t)
			roots = append(roots, e.owner)
			size += int64(t.Bytes())
		}
		err := o.par.comm.Broadcast(roots, ts...)
		if err == nil && rank0 {
			for i, e := range remote[start:end] {
				if err = read(e.name, ts[i]); err != nil {
					break
				}
			}
		}
		for _, t := range scratch {
			o.dev.Free(t)
		}
		if err != nil {
			return nil, fmt.Errorf("gather optimizer state: %w", err)
		}
		start = end
	}
	if !rank0 {
		return nil, nil
	}
	out := make([]safetensors.Tensor, len(es))
	for i, e := range es {
		out[i] = safetensors.Tensor{Name: e.name, DType: "F32", Shape: e.shape, Data: data[e.name]}
	}
	return out, nil
}

// parallel is a runner's data-parallel state.
type parallel struct {
	comm        dist.Comm
	rank, world int
	stop        bool            // the ranks agreed to stop after the last step
	ctx         context.Context // the run's context, for the stop vote
}

// A nil *parallel is the world of one process (rank 0 of 1): the
// methods below are what runner.step needs of the job, and do nothing
// there, so that one process runs the same step as a rank of a job.

// rankOf is this process's rank (0 in one process).
func (p *parallel) rankOf() int {
	if p == nil {
		return 0
	}
	return p.rank
}

// size is the number of ranks (1 in one process).
func (p *parallel) size() int {
	if p == nil {
		return 1
	}
	return p.world
}

// progress tells the hang detector that this rank reached mark, a phase
// of step stepNo (three marks per step).
func (p *parallel) progress(mark, stepNo int, phase string) {
	if p != nil {
		p.comm.Group().Progress(int64(mark), fmt.Sprintf("step %d: %s", stepNo, phase))
	}
}

// cancelled reports whether this rank's context asks to stop, its vote in
// the step's agreement (one process reads its context in stopping).
func (p *parallel) cancelled() bool {
	return p != nil && p.ctx != nil && p.ctx.Err() != nil
}

// sumHost replaces vals by their sums over the ranks.
func (p *parallel) sumHost(vals []float64) error {
	if p == nil {
		return nil
	}
	return p.comm.AllReduceHost(vals)
}

// setStop records the ranks' vote to stop after this step.
func (p *parallel) setStop(stop bool) {
	if p != nil {
		p.stop = stop
	}
}

// leader reports whether this process writes the run's files (rank 0, or
// the only process).
func (r *runner) leader() bool { return r.par == nil || r.par.rank == 0 }

// setupComm joins the job's collectives when cfg.Group is set.
func (r *runner) setupComm() error {
	g := r.cfg.Group
	if g == nil || g.Size() == 1 {
		return nil
	}
	if r.cfg.Batch%g.Size() != 0 {
		return fmt.Errorf("train: --batch %d is the global batch and must be divisible by the %d ranks", r.cfg.Batch, g.Size())
	}
	comm, err := dist.NewComm(g, r.dev, r.cfg.Comm)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	r.par = &parallel{comm: comm, rank: g.Rank(), world: g.Size()}
	return nil
}

// setupInputs sets up the tokenizer and the tokenized data: rank 0 trains
// and tokenizes (writing them into Out) while the others wait, then read
// them from Out, which must therefore be shared (it is on one node; on
// several, pass --tokenizer and a tokenized --data every node can read, or
// a shared --out).
func (r *runner) setupInputs() error {
	if r.leader() || r.cfg.Resume {
		if err := r.setupTokenizer(); err != nil {
			return err
		}
		if err := r.setupData(); err != nil {
			return err
		}
		if r.par != nil && !r.cfg.Resume {
			return r.par.comm.Barrier()
		}
		return nil
	}
	if err := r.par.comm.Barrier(); err != nil {
		return fmt.Errorf("train: waiting for rank 0 to prepare the data: %w", err)
	}
	path := filepath.Join(r.cfg.Out, TokenizerFile)
	t, err := tokenizer.LoadHF(path)
	if err != nil {
		return fmt.Errorf("train: rank %d reads the tokenizer rank 0 wrote (--out must be on a file system every rank sees): %w", r.par.rank, err)
	}
	r.tok = t
	id, err := r.tokenizerID()
	if err != nil {
		return err
	}
	dir := filepath.Join(r.cfg.Out, DataDir)
	if isDatasetDir(r.cfg.Data) {
		dir = r.cfg.Data
	}
	ds, err := data.Open(dir)
	if err != nil {
		return fmt.Errorf("train: rank %d reads the data rank 0 prepared (--out must be on a file system every rank sees): %w", r.par.rank, err)
	}
	if ds.Meta.Tokenizer != "" && ds.Meta.Tokenizer != id {
		return fmt.Errorf("train: dataset %s was tokenized by a different tokenizer (%s, this run's is %s)", ds.Dir, ds.Meta.Tokenizer, id)
	}
	r.ds = ds
	return nil
}

// newOptimizer makes the run's optimizer; data-parallel ranks first take
// rank 0's parameters, so that every rank starts from the same model.
func (r *runner) newOptimizer() (*Optimizer, error) {
	params, err := r.trainable() // all but the frozen (freeze.go)
	if err != nil {
		return nil, err
	}
	if r.par == nil {
		return NewOptimizer(r.dev, params, r.cfg.Optim)
	}
	bucket := int64(r.cfg.BucketMB * (1 << 20))
	if bucket <= 0 {
		bucket = DefaultBucketBytes
	}
	var ws []*engine.Tensor
	var roots []int
	for _, p := range r.m.Params() {
		ws = append(ws, p.W)
		roots = append(roots, 0)
	}
	if err := buckets(ws, roots, bucket, func(ts []*engine.Tensor, rs []int) error {
		return r.par.comm.Broadcast(rs, ts...)
	}); err != nil {
		return nil, fmt.Errorf("parameter broadcast: %w", err)
	}
	o, err := NewParallelOptimizer(r.dev, params, r.cfg.Optim, r.par.comm, ParallelOptions{ZeRO: r.cfg.ZeRO, BucketBytes: bucket})
	if err != nil {
		return nil, err
	}
	o.OverlapBackward(r.m)
	if r.leader() {
		mode := "gradient all-reduce"
		if r.cfg.Optim.Name == OptMuon {
			mode += ", distributed Muon"
		}
		if r.cfg.ZeRO {
			mode += ", ZeRO-1 (sharded optimizer state)"
		}
		held := 0
		for _, s := range o.muon {
			if s.m != nil {
				held++
			}
		}
		r.logf("data parallel: %d ranks, %s collectives; %d of %d sequences per micro-batch on each rank; %s (rank 0 updates %d of %d Muon matrices)",
			r.par.world, r.par.comm.Backend(), r.cfg.Batch/r.par.world, r.cfg.Batch, mode, held, len(o.muon))
	}
	return o, nil
}

// stopping reports whether the loop should stop before the next step: on
// ctx's cancellation in one process; in a job, when any rank's context was
// cancelled by the last step's vote, so that every rank stops after the
// same step.
func (r *runner) stopping(ctx context.Context) bool {
	if r.par == nil {
		return ctx.Err() != nil
	}
	r.par.ctx = ctx
	return r.par.stop
}

// evalLoss is EvalLoss over wins; the ranks of a job each score a
// contiguous share, a batch at a time (telling the hang detector they are
// busy), and add their sums.
func (r *runner) evalLoss(wins [][]int32) (float64, error) {
	if r.par == nil {
		loss, _, err := EvalLoss(r.m, wins, r.cfg.Batch)
		return loss, err
	}
	p := r.par
	lo, hi := len(wins)*p.rank/p.world, len(wins)*(p.rank+1)/p.world
	b := max(r.cfg.Batch/p.world, 1)
	var v [2]float64
	for i := lo; i < hi; i += b {
		loss, n, err := EvalLoss(r.m, wins[i:min(i+b, hi)], b)
		if err != nil {
			return 0, err
		}
		v[0] += loss * float64(n)
		v[1] += float64(n)
		p.comm.Group().Touch()
	}
	if err := p.comm.AllReduceHost(v[:]); err != nil {
		return 0, fmt.Errorf("evaluate: %w", err)
	}
	if v[1] == 0 {
		return math.NaN(), nil
	}
	return v[0] / v[1], nil
}

// gatherCheckpoint starts a data-parallel checkpoint (every rank calls
// it): the optimizer state is gathered on rank 0. follower is true on the
// other ranks, which then have nothing more to do.
func (r *runner) gatherCheckpoint() (state []safetensors.Tensor, follower bool, err error) {
	if r.par == nil {
		return nil, false, nil
	}
	if state, err = r.opt.gatherState(); err != nil {
		return nil, false, fmt.Errorf("save checkpoint: %w", err)
	}
	return state, !r.leader(), nil
}

// writeOptimizerState writes the training state: the gathered tensors of a
// job, or the optimizer's own in one process.
func (r *runner) writeOptimizerState(path string, gathered []safetensors.Tensor, modelCRC uint32) error {
	if r.par == nil {
		return SaveState(path, r.opt, r.st, modelCRC)
	}
	return writeState(path, gathered, r.opt, r.st, modelCRC)
}
