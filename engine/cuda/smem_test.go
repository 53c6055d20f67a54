//go:build cgo

package cuda

import (
	"fmt"
	"testing"
)

// hopperSmem is the dynamic shared memory a block may have on Hopper
// (H100/H200: 227 KiB).
const hopperSmem = 227 << 10

// TestWgmmaSmemFits checks that every attention_wgmma.cu launch the host
// can make asks for no more shared memory than Hopper gives a block, so a
// tile or stage change that does not fit fails here rather than at launch
// on a GPU.
func TestWgmmaSmemFits(t *testing.T) {
	type launch struct {
		name string
		smem int
	}
	var ls []launch
	for _, D := range []int{64, 128} {
		for _, px := range []bool{false, true} {
			nq := map[bool]int{false: 1, true: 2}[px]
			bns := []int{64}
			if !px || D == 64 { // the 128-key forward tiles Attention can pick
				bns = append(bns, 128)
			}
			for _, bn := range bns {
				ls = append(ls, launch{fmt.Sprintf("forward D%d px=%v bn%d", D, px, bn), wrowSmem(D, nq, bn, px)},
					launch{fmt.Sprintf("TMA forward D%d px=%v bn%d", D, px, bn), wfwdTMASmem(D, bn, px)})
			}
			bns = []int{64}
			if D == 128 { // PARALLAX_CUDA_DQ_BN=32
				bns = append(bns, 32)
			}
			for _, bn := range bns {
				ls = append(ls, launch{fmt.Sprintf("dq D%d px=%v bn%d", D, px, bn), wrowSmem(D, nq+1, bn, px)})
			}
			for _, dq := range []bool{false, true} {
				ls = append(ls, launch{fmt.Sprintf("dkv D%d px=%v fused=%v", D, px, dq), wbwdSmem(D, px, dq)})
			}
		}
	}
	for _, l := range ls {
		if l.smem > hopperSmem || l.smem <= 1024 {
			t.Errorf("%s: %d bytes of shared memory (Hopper allows %d)", l.name, l.smem, hopperSmem)
		}
	}
}
