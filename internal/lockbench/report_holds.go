package main

// The tables of issue 35's scenarios: holds of every length (holds.go),
// pass-over runs after a stand-still (passover.go) and dead waiters in a
// queue of 50 (deadqueue.go).

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// holdLabel is a hold length as the tables show it.
func holdLabel(h time.Duration) string {
	switch {
	case h == 0:
		return "0"
	case h%time.Minute == 0:
		return fmt.Sprintf("%d min", h/time.Minute)
	}
	return h.String()
}

func renderHolds(b *strings.Builder, r *results) {
	p := r.p
	fmt.Fprintf(b, "\n### Holds of every length: W waiters behind each holder\n\n")
	fmt.Fprintf(b, "W+1 contenders, each on a client of its own, lock, hold for H, unlock and lock again at once, so that W wait\n")
	fmt.Fprintf(b, "behind every holder; a run lasts %v and at least %d hand-offs (%d for holds of a minute or more; those run in the\n", p.window, p.handoffs, p.longHandoffs)
	fmt.Fprintf(b, "first %d repetition(s) only). Acquisitions/s, requests and failed requests per acquisition: every client's, from the\n", p.longReps)
	fmt.Fprintf(b, "start to the last acquisition. Waiting: the requests of every client but the holder's over the last minute of each\n")
	fmt.Fprintf(b, "hold (the whole hold when shorter; nothing in the first %v, while the queue forms), per second, all W together\n", holdsSettle)
	fmt.Fprintf(b, "and per waiter; shown for holds of 1 s or more (shorter ones are all hand-off). Gap: from a holder's Unlock call to\n")
	fmt.Fprintf(b, "the next holder's Lock returning, percentiles over every hand-off of every repetition. Medians over repetitions\n")
	fmt.Fprintf(b, "(range in parentheses). Issue 35's targets: one waiter behind a 10 min hold ≤ 1.1 requests/s over the last minute,\n")
	fmt.Fprintf(b, "50 waiters ≤ 1.5 in all; gap p99 ≤ max(250 ms, 5 %% of the hold), p50 ≤ 20 ms for holds under 100 ms; with W = 50\n")
	fmt.Fprintf(b, "and zero holds ≥ 100 acquisitions/s, ≤ 10 requests and 0 failed per acquisition.\n\n")
	fmt.Fprintf(b, "| contender | hold | W | acquisitions/s | requests per acquisition | failed per acquisition | waiting requests/s, all W | per waiter | gap p50 | p99 | max | hand-offs | reps |\n")
	fmt.Fprintf(b, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, h := range p.holds {
		for _, w := range p.holdWaiters {
			for _, c := range r.contenders {
				fmt.Fprintf(b, "| %s | %s | %d | ", c.name, holdLabel(h), w)
				ce := r.cell(holdsKey(c.key, h, w))
				if bad := r.missing(c, ce, 10); bad != "" {
					b.WriteString(bad)
					continue
				}
				var rate, per, failed, wait, waitPer []float64
				var gaps []time.Duration
				for _, hr := range ce.holds {
					n := float64(hr.acquisitions)
					rate = append(rate, n/hr.elapsed.Seconds())
					per = append(per, float64(hr.requests.sent)/n)
					failed = append(failed, float64(hr.requests.failed)/n)
					if h >= time.Second && hr.waitTime > 0 {
						wait = append(wait, hr.waitRate())
						waitPer = append(waitPer, hr.waitRate()/float64(w))
					}
					gaps = append(gaps, hr.gaps...)
				}
				waits, waitsPer := "—", "—"
				if len(wait) > 0 {
					waits, waitsPer = withRange(wait, 2), withRange(waitPer, 3)
				}
				ratePrec := 1
				if median(rate) < 1 {
					ratePrec = 3 // holds of a minute or more: a few acquisitions over minutes
				}
				fmt.Fprintf(b, "%s | %s | %s | %s | %s | %s | %s | %s | %d | %d |\n", withRange(rate, ratePrec), withRange(per, 1),
					withRange(failed, 2), waits, waitsPer, dur(quantile(gaps, 0.5)), dur(quantile(gaps, 0.99)),
					dur(quantile(gaps, 1)), len(gaps), len(ce.holds))
			}
		}
	}
}

func renderPassover(b *strings.Builder, r *results) {
	p := r.p
	fmt.Fprintf(b, "\n### Pass-over runs after a stand-still\n\n")
	fmt.Fprintf(b, "A holder takes the lock; %d waiters ask %v apart; the holder keeps the lock %v and unlocks (held), or dies\n", p.passoverWaiters, p.passoverSpacing, p.standStill)
	fmt.Fprintf(b, "at once and its lease (azlease: 15 s, the default; etcd: its session, TTL %v) runs out (killed). From then on each waiter, once\n", p.etcdTTL)
	fmt.Fprintf(b, "served, holds %v, unlocks and asks again at once, until every waiter has been served once. Pass-overs of a\n", p.passoverHold)
	fmt.Fprintf(b, "waiter: acquisitions, before its first, by Lock calls that began after its own (the others going round, or later\n")
	fmt.Fprintf(b, "waiters of the first round). Issue 35's target: at most one per live waiter. Medians over repetitions (range in\n")
	fmt.Fprintf(b, "parentheses).\n\n")
	fmt.Fprintf(b, "| contender | stand-still | waiters | pass-overs, most for one waiter | in all | longest wait after the stand-still | acquisitions after it | not served in %v | reps |\n", passoverBound)
	fmt.Fprintf(b, "|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.contenders {
		for _, how := range standHows {
			fmt.Fprintf(b, "| %s | %s | %d | ", c.name, how, p.passoverWaiters)
			ce := r.cell(passoverKey(c.key, how))
			if bad := r.missing(c, ce, 6); bad != "" {
				b.WriteString(bad)
				continue
			}
			var most, total, longest, acqs, unserved []float64
			for _, pr := range ce.passovers {
				s := 0
				for _, n := range pr.passedOver {
					s += n
				}
				most = append(most, float64(slices.Max(pr.passedOver)))
				total = append(total, float64(s))
				longest = append(longest, slices.Max(pr.waitedAfter).Seconds())
				acqs = append(acqs, float64(pr.acquisitions))
				unserved = append(unserved, float64(pr.unserved))
			}
			fmt.Fprintf(b, "%s | %s | %s s | %s | %s | %d |\n", withRange(most, 0), withRange(total, 0), withRange(longest, 2),
				withRange(acqs, 0), withRange(unserved, 0), len(ce.passovers))
		}
	}
}

func renderDeadQueue(b *strings.Builder, r *results) {
	p := r.p
	dead, cut := victims(p.deadWaiters)
	fmt.Fprintf(b, "\n### Dead waiters anywhere in a queue of %d\n\n", p.deadWaiters)
	fmt.Fprintf(b, "A holder has the lock; %d waiters ask %v apart (numbered from 0 in that order); a second after the last\n", p.deadWaiters, p.deadSpacing)
	fmt.Fprintf(b, "asked, waiters %d and %d die (killed: nothing of theirs reaches the service any more) and waiter %d is cut off\n", dead[0], dead[1], cut)
	fmt.Fprintf(b, "for %v (what it sends is lost, or arrives once the cut ends) and comes back, and %v later the holder\n", p.deadCut, p.deadSpacing)
	fmt.Fprintf(b, "unlocks. Each waiter, once served, holds %v and leaves. Ordinary gap: the median, from an Unlock call to the\n", p.deadHold)
	fmt.Fprintf(b, "next Lock returning, of the hand-offs that passed over no victim and did not go to one. Cost per victim: what\n")
	fmt.Fprintf(b, "the other hand-offs (those that passed over a victim not served yet, or went to one: from when it was back,\n")
	fmt.Fprintf(b, "if that was after the Unlock call) took beyond the ordinary\n")
	fmt.Fprintf(b, "gap, summed, over the 3 victims; costliest: the most one such hand-off took beyond it (meaningful for the\n")
	fmt.Fprintf(b, "contenders that serve in order). Drain: from the holder's Unlock call to the last waiter served. Overtakes:\n")
	fmt.Fprintf(b, "pairs of the other waiters served out of asking order. Issue 35's target: ≤ 300 ms per victim, the others in\n")
	fmt.Fprintf(b, "order. Medians over repetitions (range in parentheses).\n\n")
	fmt.Fprintf(b, "| contender | victims | ordinary gap | cost per victim | costliest hand-off | drain | overtakes | reps |\n")
	fmt.Fprintf(b, "|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, c := range r.contenders {
		for _, v := range queueVariants {
			label := map[string]string{queueAlive: "none (baseline)", queueDead: fmt.Sprintf("%d, %d killed; %d cut off", dead[0], dead[1], cut)}[v]
			fmt.Fprintf(b, "| %s | %s | ", c.name, label)
			ce := r.cell(deadQueueKey(c.key, v))
			if bad := r.missing(c, ce, 6); bad != "" {
				b.WriteString(bad)
				continue
			}
			var ordinary, perVictim, costliest, drain, over []float64
			for _, dr := range ce.deadQueues {
				ordinary = append(ordinary, dr.ordinary.Seconds()*1000)
				drain = append(drain, dr.drain.Seconds())
				over = append(over, float64(dr.overtakes))
				if v == queueDead {
					perVictim = append(perVictim, dr.perVictim.Seconds()*1000)
					if len(dr.costs) > 0 {
						costliest = append(costliest, slices.Max(dr.costs).Seconds()*1000)
					}
				}
			}
			pv, cl := "—", "—"
			if c.key == "unordered" && v == queueDead {
				pv, cl = "— (unordered)", "—"
				perVictim, costliest = nil, nil
			}
			if len(perVictim) > 0 {
				pv = withRange(perVictim, 0) + " ms"
			}
			if len(costliest) > 0 {
				cl = withRange(costliest, 0) + " ms"
			}
			fmt.Fprintf(b, "%s ms | %s | %s | %s s | %s | %d |\n", withRange(ordinary, 1), pv, cl, withRange(drain, 2),
				withRange(over, 0), len(ce.deadQueues))
		}
	}
}
