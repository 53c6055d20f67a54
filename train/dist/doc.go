// Package dist is what data-parallel training needs beyond one process: the
// job's shape from the launcher's environment (torchrun-style variables or
// SLURM's), a TCP rendezvous at MASTER_ADDR:MASTER_PORT, a liveness channel
// that stops every rank within a bounded time when one dies or hangs, and
// collectives on engine tensors (Comm) through NCCL on CUDA devices or
// through TCP for any device. Launch starts the local ranks of a one-node
// job as child processes.
//
// Topology: rank 0 listens; every other rank keeps one TCP connection to it
// for the job's lifetime. The connection carries heartbeats (with each
// rank's progress), abort notices and, for the TCP collectives, the data.
// Rank 0 notices a dead or silent rank and tells the others; a rank that
// notices rank 0 gone stops by itself. NCCL traffic flows on NCCL's own
// channels, and the group aborts the NCCL communicator when it fails.
//
// This package imports no backend: a device that runs collectives itself
// (engine/cuda with NCCL) offers them through methods found by a type
// assertion (see NewComm).
package dist
