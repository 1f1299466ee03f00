// The benchmarks' "real work", shared word for word by the bench-probe plugin
// and the native side of the benchmark (which includes this file).

/// Millicores a CPU quantity stands for (`250m`, `1`, `0.5`); 0 when unparsable.
pub(crate) fn millicores(quantity: &str) -> u64 {
    match quantity.strip_suffix('m') {
        Some(millis) => millis.parse().unwrap_or(0),
        None => quantity.parse::<f64>().map_or(0, |cores| (cores * 1000.0) as u64),
    }
}

/// Adds the pod's containers' CPU requests to its namespace's total.
pub(crate) fn add_requests(
    totals: &mut std::collections::BTreeMap<String, u64>,
    pod: &k8s_openapi::api::core::v1::Pod,
) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let requested: u64 = pod
        .spec
        .iter()
        .flat_map(|spec| &spec.containers)
        .filter_map(|container| container.resources.as_ref()?.requests.as_ref()?.get("cpu"))
        .map(|quantity| millicores(&quantity.0))
        .sum();
    *totals.entry(namespace).or_default() += requested;
}
