//! The result table: samples of a measurement, their median and min–max, and the markdown they print as.

/// Several measurements of one quantity.
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples(Vec<f64>);

impl Samples {
    pub(crate) fn push(&mut self, value: f64) {
        self.0.push(value);
    }

    pub(crate) fn values(&self) -> &[f64] {
        &self.0
    }

    pub(crate) fn median(&self) -> f64 {
        let sorted = self.sorted();
        match sorted.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => sorted[n / 2],
            n => f64::midpoint(sorted[n / 2 - 1], sorted[n / 2]),
        }
    }

    /// The sample nearest rank `p` (0 to 1); unlike [`Self::median`], never
    /// between two samples.
    pub(crate) fn percentile(&self, p: f64) -> f64 {
        let sorted = self.sorted();
        sorted
            .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    }

    /// The median, with min–max in brackets when there is more than one sample.
    pub(crate) fn show(&self, unit: Unit) -> String {
        let min = self.0.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.0.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if self.0.len() > 1 {
            format!("{} ({}–{})", unit.show(self.median()), unit.show(min), unit.show(max))
        } else {
            unit.show(self.median())
        }
    }

    fn sorted(&self) -> Vec<f64> {
        let mut sorted = self.0.clone();
        sorted.sort_by(f64::total_cmp);
        sorted
    }
}

impl FromIterator<f64> for Samples {
    fn from_iter<I: IntoIterator<Item = f64>>(values: I) -> Self {
        Self(values.into_iter().collect())
    }
}

impl Extend<f64> for Samples {
    fn extend<I: IntoIterator<Item = f64>>(&mut self, values: I) {
        self.0.extend(values);
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Unit {
    Millis,
    Micros,
    Mib,
    /// MiB with one decimal.
    MibTenths,
    PerSecond,
    /// A plain number, two decimals.
    Plain,
}

impl Unit {
    fn show(self, value: f64) -> String {
        match self {
            Self::Millis if value < 10.0 => format!("{value:.1} ms"),
            Self::Millis => format!("{value:.0} ms"),
            Self::Micros => format!("{value:.2} µs"),
            Self::Mib => format!("{value:.0} MiB"),
            Self::MibTenths => format!("{value:.1} MiB"),
            Self::PerSecond => format!("{value:.0}/s"),
            Self::Plain => format!("{value:.2}"),
        }
    }
}

/// A count of pods as a row names it: `200`, `10k`.
pub(crate) fn count(pods: usize) -> String {
    if pods >= 1000 {
        format!("{}k", pods / 1000)
    } else {
        pods.to_string()
    }
}

/// One line of the result table.
#[derive(Debug)]
pub(crate) struct Line {
    pub(crate) row: String,
    pub(crate) ours: String,
    pub(crate) theirs: String,
    pub(crate) ratio: f64,
    pub(crate) target: String,
}

impl Line {
    /// The five cells, between bars.
    fn cells(&self) -> String {
        [
            &self.row,
            &self.ours,
            &self.theirs,
            &show_ratio(self.ratio),
            &self.target,
        ]
        .map(String::as_str)
        .join(" | ")
    }
}

/// The lines so far, echoed to stderr as they come; printed as markdown at the end.
#[derive(Debug, Default)]
pub(crate) struct Table(Vec<Line>);

fn show_ratio(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.2}×")
    } else {
        "–".into()
    }
}

impl Table {
    pub(crate) fn add(
        &mut self,
        row: impl Into<String>,
        ours: String,
        theirs: String,
        ratio: f64,
        target: impl Into<String>,
    ) {
        let line = Line {
            row: row.into(),
            ours,
            theirs,
            ratio,
            target: target.into(),
        };
        eprintln!("  {}", line.cells());
        self.0.push(line);
    }

    #[cfg(test)]
    pub(crate) fn lines(&self) -> &[Line] {
        &self.0
    }

    pub(crate) fn print(&self) {
        println!("| row | kinformer | kube-rs | ratio | target |");
        println!("| --- | --- | --- | --- | --- |");
        for line in &self.0 {
            println!("| {} |", line.cells());
        }
    }
}
