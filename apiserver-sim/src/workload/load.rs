//! How a workload's CPU load changes: at random, or in phases that rise and fall.

use std::f64::consts::TAU;
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;

/// Each pod's CPU request, in millicores.
pub(super) const CPU_REQUEST: f64 = 200.0;

/// How the pods' CPU usage changes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Load {
    /// Each usage update draws 20 to 400 millicores at random.
    #[default]
    Random,
    /// Each Deployment's CPU demand follows a wave of this period, from 1 to 2
    /// pods' worth at 50% of their request up to 6 to 9 (seeded per Deployment,
    /// as is where in the wave it starts); every ready pod uses its share of it.
    Phases {
        /// The time from one low to the next.
        period: Duration,
    },
}

/// One Deployment's CPU demand under [`Load::Phases`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Wave {
    period: Duration,
    /// Where in its cycle the wave starts, in radians: up to a quarter in.
    offset: f64,
    /// The demand at the low and the high, in millicores.
    low: f64,
    high: f64,
}

impl Wave {
    pub(super) fn seeded(rng: &mut StdRng, period: Duration) -> Self {
        // A pod at the autoscaler's 50% target uses half its request.
        let pod_at_target = CPU_REQUEST / 2.0;
        Self {
            period,
            offset: rng.random_range(0.0..TAU / 4.0),
            low: pod_at_target * rng.random_range(1.0..2.0),
            high: pod_at_target * rng.random_range(6.0..9.0),
        }
    }

    /// The demand `elapsed` after the workload started, in millicores: the low
    /// at the start of a cycle, the high half a period later.
    pub(super) fn demand(&self, elapsed: Duration) -> f64 {
        let angle = TAU * elapsed.as_secs_f64() / self.period.as_secs_f64().max(f64::EPSILON) + self.offset;
        self.low + (self.high - self.low) * (1.0 - angle.cos()) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn a_wave_rises_from_its_low_to_its_high_and_falls_back() {
        let wave = Wave {
            period: Duration::from_secs(100),
            offset: 0.0,
            low: 150.0,
            high: 750.0,
        };
        let at = |secs| wave.demand(Duration::from_secs(secs));
        assert!((at(0) - 150.0).abs() < 1e-9);
        assert!(at(25) > at(0) && at(50) > at(25));
        assert!((at(50) - 750.0).abs() < 1e-9);
        assert!(at(75) < at(50) && at(100) < at(75));
        assert!((at(100) - 150.0).abs() < 1e-9);
    }

    #[test]
    fn seeded_waves_need_few_pods_at_the_low_and_many_at_the_high() {
        let mut rng = StdRng::seed_from_u64(9);
        for _ in 0..20 {
            let wave = Wave::seeded(&mut rng, Duration::from_secs(60));
            // Pods an autoscaler at 50% of a 200m request wants: demand / 100m.
            let pods = |demand: f64| (demand / (CPU_REQUEST / 2.0)).ceil();
            assert!(pods(wave.low) <= 2.0, "{wave:?}");
            assert!(pods(wave.high) >= 6.0, "{wave:?}");
        }
    }
}
