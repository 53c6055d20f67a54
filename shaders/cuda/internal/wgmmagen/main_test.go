package main

import (
	"os"
	"testing"
)

// TestCommittedHeaderIsCurrent fails when shaders/cuda/wgmma.cuh is not
// what the generator writes (run go generate ./shaders/cuda).
func TestCommittedHeaderIsCurrent(t *testing.T) {
	got, err := os.ReadFile("../../wgmma.cuh")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != generate() {
		t.Fatal("shaders/cuda/wgmma.cuh is stale: run go generate ./shaders/cuda")
	}
}
