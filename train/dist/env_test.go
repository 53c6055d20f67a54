package dist

import (
	"reflect"
	"strings"
	"testing"
)

func TestExpandNodelist(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "node7", want: []string{"node7"}},
		{in: "gpu[01-04,07],cpu3", want: []string{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu3"}},
		{in: "a[8-11]", want: []string{"a8", "a9", "a10", "a11"}},
		{in: "n-[009-011]-ib", want: []string{"n-009-ib", "n-010-ib", "n-011-ib"}},
		{in: "r[1-2]n[1,3]", want: []string{"r1n1", "r1n3", "r2n1", "r2n3"}},
		{in: "x1, y[2]", want: []string{"x1", "y2"}},
		{in: "gpu[3-1]", err: "bad range"},
		{in: "gpu[1-", err: "unclosed"},
		{in: "gpu]1", err: "unbalanced"},
		{in: "gpu[a-b]", err: "bad range"},
		{in: "", err: "names no host"},
	} {
		got, err := ExpandNodelist(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: got %v, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		ok   bool
		want Env
		err  string
	}{
		{name: "nothing", vars: nil},
		{name: "torchrun", ok: true,
			vars: map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234", "TORCHELASTIC_RUN_ID": "j1"},
			want: Env{Rank: 3, World: 8, LocalRank: 1, LocalWorld: 2, Addr: "10.0.0.1:1234", Job: "j1", Source: "torchrun"}},
		{name: "torchrun default port and local rank", ok: true,
			vars: map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "::1"},
			want: Env{Rank: 1, World: 2, LocalRank: 1, Addr: "[::1]:29500", Source: "torchrun"}},
		{name: "one process", vars: map[string]string{"RANK": "0", "WORLD_SIZE": "1"}},
		{name: "no master", vars: map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, err: "MASTER_ADDR"},
		{name: "rank alone", vars: map[string]string{"RANK": "0"}, err: "set together"},
		{name: "bad rank", vars: map[string]string{"RANK": "x", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, err: `RANK="x"`},
		{name: "rank too big", vars: map[string]string{"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, err: "not below"},
		{name: "bad port", vars: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"}, err: "not a TCP port"},
		{name: "slurm", ok: true,
			vars: map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_STEP_ID": "0",
				"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[07-10]"},
			want: Env{Rank: 5, World: 8, LocalRank: 1, Addr: "gpu07:29742", Job: "slurm-4242.0", Source: "slurm"}},
		{name: "slurm step list and master", ok: true,
			vars: map[string]string{"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_NTASKS": "16", "SLURM_LOCALID": "0", "SLURM_STEPID": "3",
				"SLURM_STEP_NODELIST": "b[2-3]", "SLURM_JOB_NODELIST": "a1", "MASTER_PORT": "5000"},
			want: Env{Rank: 1, World: 2, Addr: "b2:5000", Source: "slurm"}},
		{name: "slurm batch script is one process", vars: map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_NODELIST": "a1"}},
		{name: "torchrun wins over slurm", ok: true,
			vars: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_STEP_ID": "0"},
			want: Env{Rank: 0, World: 2, Addr: "127.0.0.1:29500", Source: "torchrun"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := FromEnv(func(k string) string { return tc.vars[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil || ok != tc.ok || (ok && got != tc.want) {
				t.Fatalf("got %+v, %v, %v; want %+v, %v", got, ok, err, tc.want, tc.ok)
			}
		})
	}
}

func TestOptionsFromEnv(t *testing.T) {
	vars := map[string]string{"PARALLAX_DIST_TIMEOUT": "90s", "PARALLAX_DIST_HANG_TIMEOUT": "2.5"}
	o, err := OptionsFromEnv(func(k string) string { return vars[k] })
	if err != nil || o.Timeout.Seconds() != 90 || o.HangTimeout.Seconds() != 2.5 || o.HeartbeatTimeout != 0 {
		t.Errorf("got %+v, %v", o, err)
	}
	if _, err := OptionsFromEnv(func(k string) string { return map[string]string{"PARALLAX_DIST_TIMEOUT": "soon"}[k] }); err == nil {
		t.Error("a bad duration was accepted")
	}
}
