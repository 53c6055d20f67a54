package dist

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// DefaultPort is the rendezvous port when MASTER_PORT is not set (torchrun's
// default).
const DefaultPort = 29500

// Env is one process's place in a job.
type Env struct {
	Rank, World int // this process's rank and the number of ranks
	// LocalRank is the rank among the processes of this node (the GPU to
	// use); LocalWorld their number (0 when the launcher does not say).
	LocalRank, LocalWorld int
	Addr                  string // rank 0's rendezvous address, host:port
	// Job identifies the job; processes of different jobs that meet at one
	// address refuse each other. Empty: not checked.
	Job    string
	Source string // "torchrun" or "slurm": which variables described the job
}

// String describes the process: "rank 1 of 2 (local rank 1, rendezvous at
// 127.0.0.1:29500, from torchrun variables)".
func (e Env) String() string {
	return fmt.Sprintf("rank %d of %d (local rank %d, rendezvous at %s, from %s variables)",
		e.Rank, e.World, e.LocalRank, e.Addr, e.Source)
}

// FromEnv reads the job's shape from environment variables (getenv is
// os.Getenv in a program). torchrun's (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) win over SLURM's
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the first host of
// SLURM_STEP_NODELIST or SLURM_JOB_NODELIST), which count only inside a job
// step that srun started (SLURM_STEP_ID set): a batch script itself is one
// process. ok is false when no variables describe a job of more than one
// process; err reports variables that are set but wrong.
func FromEnv(getenv func(string) string) (e Env, ok bool, err error) {
	num := func(name string) (int, bool, error) {
		s := strings.TrimSpace(getenv(name))
		if s == "" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, true, fmt.Errorf("distributed: %s=%q is not a non-negative integer", name, s)
		}
		return n, true, nil
	}
	port := func(def int) (string, error) {
		p, set, err := num("MASTER_PORT")
		if err != nil {
			return "", err
		}
		if !set {
			p = def
		}
		if p < 1 || p > 65535 {
			return "", fmt.Errorf("distributed: MASTER_PORT=%d is not a TCP port", p)
		}
		return strconv.Itoa(p), nil
	}
	if getenv("WORLD_SIZE") != "" || getenv("RANK") != "" {
		e.Source = "torchrun"
		var rset, wset bool
		if e.World, wset, err = num("WORLD_SIZE"); err != nil {
			return e, false, err
		}
		if e.Rank, rset, err = num("RANK"); err != nil {
			return e, false, err
		}
		if !wset || !rset {
			return e, false, fmt.Errorf("distributed: RANK and WORLD_SIZE must be set together (RANK=%q, WORLD_SIZE=%q)", getenv("RANK"), getenv("WORLD_SIZE"))
		}
		if e.World <= 1 {
			return e, false, nil
		}
		lr, lset, err := num("LOCAL_RANK")
		if err != nil {
			return e, false, err
		}
		e.LocalRank = lr
		if !lset {
			e.LocalRank = e.Rank // a one-node job
		}
		if e.LocalWorld, _, err = num("LOCAL_WORLD_SIZE"); err != nil {
			return e, false, err
		}
		host := strings.TrimSpace(getenv("MASTER_ADDR"))
		if host == "" {
			return e, false, fmt.Errorf("distributed: RANK and WORLD_SIZE are set but MASTER_ADDR is not (the host of rank 0)")
		}
		p, err := port(DefaultPort)
		if err != nil {
			return e, false, err
		}
		e.Addr = net.JoinHostPort(host, p)
		e.Job = firstNonEmpty(getenv("PARALLAX_DIST_JOB"), getenv("TORCHELASTIC_RUN_ID"))
	} else if getenv("SLURM_PROCID") != "" && (getenv("SLURM_STEP_ID") != "" || getenv("SLURM_STEPID") != "") {
		e.Source = "slurm"
		if e.Rank, _, err = num("SLURM_PROCID"); err != nil {
			return e, false, err
		}
		var set bool
		if e.World, set, err = num("SLURM_STEP_NUM_TASKS"); err != nil {
			return e, false, err
		}
		if !set {
			if e.World, set, err = num("SLURM_NTASKS"); err != nil {
				return e, false, err
			}
		}
		if !set {
			if e.World, _, err = num("SLURM_NPROCS"); err != nil {
				return e, false, err
			}
		}
		if e.World <= 1 {
			return e, false, nil
		}
		if e.LocalRank, _, err = num("SLURM_LOCALID"); err != nil {
			return e, false, err
		}
		host := strings.TrimSpace(getenv("MASTER_ADDR"))
		if host == "" {
			list := firstNonEmpty(getenv("SLURM_STEP_NODELIST"), getenv("SLURM_JOB_NODELIST"), getenv("SLURM_NODELIST"))
			if list == "" {
				return e, false, fmt.Errorf("distributed: SLURM_PROCID is set but neither MASTER_ADDR nor SLURM_JOB_NODELIST is")
			}
			hosts, err := ExpandNodelist(list)
			if err != nil {
				return e, false, err
			}
			host = hosts[0]
		}
		// Jobs sharing a node get different default ports.
		def := DefaultPort
		if id, set, _ := num("SLURM_JOB_ID"); set {
			def = DefaultPort + id%1000
		}
		p, err := port(def)
		if err != nil {
			return e, false, err
		}
		e.Addr = net.JoinHostPort(host, p)
		e.Job = firstNonEmpty(getenv("PARALLAX_DIST_JOB"), slurmJob(getenv))
	} else {
		return e, false, nil
	}
	if e.Rank >= e.World {
		return e, false, fmt.Errorf("distributed: rank %d is not below the world size %d (%s variables)", e.Rank, e.World, e.Source)
	}
	return e, true, nil
}

func slurmJob(getenv func(string) string) string {
	id := getenv("SLURM_JOB_ID")
	if id == "" {
		return ""
	}
	return "slurm-" + id + "." + firstNonEmpty(getenv("SLURM_STEP_ID"), getenv("SLURM_STEPID"))
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v = strings.TrimSpace(v); v != "" {
			return v
		}
	}
	return ""
}

// ExpandNodelist expands SLURM's compact host list syntax:
// "gpu[01-03,07],cpu3" is gpu01, gpu02, gpu03, gpu07, cpu3. Ranges keep
// their zero padding; several bracket groups in one name multiply
// ("r[1-2]n[1-2]" is r1n1, r1n2, r2n1, r2n2).
func ExpandNodelist(list string) ([]string, error) {
	var out []string
	depth, start := 0, 0
	flush := func(end int) error {
		item := strings.TrimSpace(list[start:end])
		if item == "" {
			return nil
		}
		hosts, err := expandHost(item)
		if err != nil {
			return fmt.Errorf("distributed: node list %q: %w", list, err)
		}
		out = append(out, hosts...)
		return nil
	}
	for i, c := range list {
		switch c {
		case '[':
			depth++
			if depth > 1 {
				return nil, fmt.Errorf("distributed: node list %q: nested brackets", list)
			}
		case ']':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("distributed: node list %q: unbalanced ']'", list)
			}
		case ',':
			if depth == 0 {
				if err := flush(i); err != nil {
					return nil, err
				}
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("distributed: node list %q: unclosed '['", list)
	}
	if err := flush(len(list)); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("distributed: node list %q names no host", list)
	}
	return out, nil
}

// expandHost expands one name with zero or more bracket groups.
func expandHost(s string) ([]string, error) {
	open := strings.IndexByte(s, '[')
	if open < 0 {
		return []string{s}, nil
	}
	end := strings.IndexByte(s[open:], ']')
	if end < 0 {
		return nil, fmt.Errorf("unclosed '[' in %q", s)
	}
	end += open
	prefix, body, rest := s[:open], s[open+1:end], s[end+1:]
	tails, err := expandHost(rest)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, part := range strings.Split(body, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		if part == "" || lo == "" || (isRange && hi == "") {
			return nil, fmt.Errorf("empty range in %q", s)
		}
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || b < a {
			return nil, fmt.Errorf("bad range %q in %q", part, s)
		}
		if b-a > 100000 {
			return nil, fmt.Errorf("range %q in %q is too long", part, s)
		}
		width := len(lo)
		for n := a; n <= b; n++ {
			num := fmt.Sprintf("%0*d", width, n)
			for _, t := range tails {
				out = append(out, prefix+num+t)
			}
		}
	}
	return out, nil
}
