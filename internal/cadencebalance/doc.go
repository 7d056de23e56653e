// Package cadencebalance is a reference model of the central load balancer
// of Uber Cadence's shard distributor (its "greedy" mode), run beside
// package shards in the load benchmark (internal/shardbench) the way
// internal/ehbalance stands for the Event Hubs processors. It was written
// from the distributor's dynamic-configuration defaults and the pull
// requests that describe the algorithm (cadence-workflow/cadence #7354,
// #7536, #7545, #7948, #8030, as summarised in
// /work/shared/research/balancers-load.md §1.4), not ported: there is no
// etcd and no RPC, only the decision a leader makes each pass.
//
// # The algorithm
//
// An elected leader keeps each shard's smoothed load and the time it last
// moved. Every pass (2 s in the distributor's development configuration)
// it:
//
//  1. places unassigned shards (new ones, and those of executors that
//     left) on the least loaded executor, each counted at the mean shard
//     load until it reports (#7948);
//  2. computes each executor's load and the mean, per executor;
//  3. takes as sources the executors above UpperBand × mean (1.15) and as
//     destinations those below LowerBand × mean (0.90) — any executor below
//     the mean when the imbalance (max/mean) is SevereImbalance (1.3) or
//     more;
//  4. moves shards from the most loaded source to the least loaded
//     destination, one at a time, each the shard that best evens the pair
//     and only with a positive benefit (the pair's larger load goes down),
//     skipping shards moved within Cooldown (60 s), until the budget of
//     MoveBudget × shards (1 %, at least one) per pass is spent or no move
//     helps.
//
// The leader's view is exact and its moves take effect at once (the model
// charges no hand-off): what it shows is what bands, a budget and a
// cooldown give when one process decides.
package cadencebalance
