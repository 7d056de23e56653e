// Package shardbench runs azlease's shard balancer (package shards) and an
// implementation of the Event Hubs processors' load balancer
// (internal/ehbalance) through the same scenarios, side by side, on the
// same emulator (azleasetest) and the real azblob client, in fake time
// (testing/synctest): cold start, a replica joins, a replica stops
// cleanly, a replica crashes. For each run it measures the time to
// balance, the moves beside the minimum, the shard-seconds owned twice,
// the requests per replica-hour and the failed (4xx) requests.
//
// Its tests are the benchmark: `go test ./internal/shardbench` runs a
// smoke version (one seed of each scenario on 10 shards and 3 replicas,
// asserting only that every cell produced figures and that azlease never
// owned a shard twice);
// `make bench` runs the full version with AZLEASE_SHARDBENCH_REPORT set
// and folds the table into bench/results.md.
package shardbench
