//! The workloads and Services that kubectl's generators send in protobuf (`kubectl create deployment`, `job`, `cronjob`, `service …`, `kubectl run`), read into JSON.
//!
//! A pod spec is read in the fields those generators and everyday clients
//! write: containers (name, image, command, args, working directory, ports,
//! plain `env` values, resources, pull policy, stdin and tty), init
//! containers, restart and DNS policies, grace and deadline seconds, node
//! selector and name, service account, priority class, scheduler and image
//! pull secrets. A body that sets anything else is `415`, said so, rather
//! than stored without it.

use std::collections::BTreeMap;

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::batch::v1 as batch;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value, json};

use super::{label_selector, object_meta, without_nulls};
use crate::status::{ApiError, Result};

/// The fields of a decoded message that are not read, `rest`, must be unset.
fn unread<T: prost::Message>(kind: &str, rest: &T) -> Result<()> {
    if zero_message(&rest.encode_to_vec()) {
        Ok(())
    } else {
        Err(ApiError::unsupported_body(&format!(
            "{} ({kind} with fields this emulation does not read in protobuf; send it as JSON)",
            super::MEDIA_TYPE
        )))
    }
}

/// Whether encoded message fields are all zero values: Go's protobuf
/// encoding writes a non-pointer field even when it is `""`, `false` or `0`,
/// and such a field says nothing. An embedded message of zero fields is zero
/// too; anything else (a string with text, a non-zero number) is set.
fn zero_message(mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        let Some(key) = varint(&mut bytes) else {
            return false;
        };
        let zero = match key & 7 {
            0 => varint(&mut bytes) == Some(0),
            1 => take(&mut bytes, 8).is_some_and(|value| value.iter().all(|b| *b == 0)),
            5 => take(&mut bytes, 4).is_some_and(|value| value.iter().all(|b| *b == 0)),
            2 => varint(&mut bytes)
                .and_then(|length| take(&mut bytes, usize::try_from(length).ok()?))
                .is_some_and(|embedded| embedded.is_empty() || zero_message(embedded)),
            _ => false,
        };
        if !zero {
            return false;
        }
    }
    true
}

fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0_u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

fn take<'a>(bytes: &mut &'a [u8], length: usize) -> Option<&'a [u8]> {
    let (taken, rest) = (bytes.get(..length)?, bytes.get(length..)?);
    *bytes = rest;
    Some(taken)
}

/// An object of the fields that are set: not null, not an empty list, map or string.
fn set_fields<const N: usize>(fields: [(&str, Value); N]) -> Value {
    let mut object = Map::new();
    for (name, value) in fields {
        let empty = match &value {
            Value::Null => true,
            Value::String(text) => text.is_empty(),
            Value::Array(items) => items.is_empty(),
            Value::Object(fields) => fields.is_empty(),
            _ => false,
        };
        if !empty {
            object.insert(name.into(), value);
        }
    }
    Value::Object(object)
}

fn quantities(values: BTreeMap<String, Quantity>) -> Value {
    values
        .into_iter()
        .map(|(name, quantity)| (name, json!(quantity.string.unwrap_or_default())))
        .collect::<Map<String, Value>>()
        .into()
}

pub(super) fn int_or_string(value: IntOrString) -> Value {
    match (value.r#type, value.int_val, value.str_val) {
        (Some(1), _, Some(text)) => json!(text),
        (_, Some(number), _) => json!(number),
        (_, _, Some(text)) => json!(text),
        _ => json!(0),
    }
}

fn container(mut container: core::Container) -> Result<Value> {
    let ports: Vec<Value> = std::mem::take(&mut container.ports)
        .into_iter()
        .map(|port| {
            without_nulls(
                json!({"name": port.name, "hostPort": port.host_port, "containerPort": port.container_port,
                                 "protocol": port.protocol, "hostIP": port.host_ip}),
            )
        })
        .collect();
    let mut env = Vec::new();
    for mut var in std::mem::take(&mut container.env) {
        let value = without_nulls(json!({"name": var.name.take(), "value": var.value.take()}));
        unread("an env var", &var)?;
        env.push(value);
    }
    let resources = container.resources.take().map(|mut resources| {
        let value = set_fields([
            ("limits", quantities(std::mem::take(&mut resources.limits))),
            ("requests", quantities(std::mem::take(&mut resources.requests))),
        ]);
        (value, resources)
    });
    if let Some((_, rest)) = &resources {
        unread("container resources", rest)?;
    }
    let value = set_fields([
        ("name", json!(container.name.take())),
        ("image", json!(container.image.take())),
        ("command", json!(std::mem::take(&mut container.command))),
        ("args", json!(std::mem::take(&mut container.args))),
        ("workingDir", json!(container.working_dir.take())),
        ("ports", json!(ports)),
        ("env", json!(env)),
        ("imagePullPolicy", json!(container.image_pull_policy.take())),
        // Go writes these booleans whether set or not; `false` is unset.
        ("stdin", json!(container.stdin.take().filter(|on| *on))),
        ("stdinOnce", json!(container.stdin_once.take().filter(|on| *on))),
        ("tty", json!(container.tty.take().filter(|on| *on))),
    ]);
    unread("a container", &container)?;
    let mut value = value;
    // kubectl's generators send an empty `resources`; Go writes it back as `{}`.
    value["resources"] = resources.map_or_else(|| json!({}), |(resources, _)| resources);
    Ok(value)
}

fn pod_spec(mut spec: core::PodSpec) -> Result<Value> {
    let containers = std::mem::take(&mut spec.containers)
        .into_iter()
        .map(container)
        .collect::<Result<Vec<_>>>()?;
    let init_containers = std::mem::take(&mut spec.init_containers)
        .into_iter()
        .map(container)
        .collect::<Result<Vec<_>>>()?;
    let pull_secrets: Vec<Value> = std::mem::take(&mut spec.image_pull_secrets)
        .into_iter()
        .map(|secret| without_nulls(json!({"name": secret.name})))
        .collect();
    let value = set_fields([
        ("initContainers", json!(init_containers)),
        ("containers", json!(containers)),
        ("restartPolicy", json!(spec.restart_policy.take())),
        (
            "terminationGracePeriodSeconds",
            json!(spec.termination_grace_period_seconds.take()),
        ),
        ("activeDeadlineSeconds", json!(spec.active_deadline_seconds.take())),
        ("dnsPolicy", json!(spec.dns_policy.take())),
        ("nodeSelector", json!(std::mem::take(&mut spec.node_selector))),
        ("serviceAccountName", json!(spec.service_account_name.take())),
        ("serviceAccount", json!(spec.service_account.take())),
        ("nodeName", json!(spec.node_name.take())),
        ("imagePullSecrets", json!(pull_secrets)),
        ("schedulerName", json!(spec.scheduler_name.take())),
        ("priorityClassName", json!(spec.priority_class_name.take())),
    ]);
    unread("a pod spec", &spec)?;
    Ok(value)
}

fn template(template: Option<core::PodTemplateSpec>) -> Result<Value> {
    let Some(template) = template else {
        return Ok(Value::Null);
    };
    let spec = template.spec.map(pod_spec).transpose()?.unwrap_or(Value::Null);
    Ok(set_fields([
        ("metadata", object_meta(template.metadata.unwrap_or_default())),
        ("spec", spec),
    ]))
}

pub(super) fn pod(pod: core::Pod) -> Result<Value> {
    let spec = pod.spec.map(pod_spec).transpose()?.unwrap_or(Value::Null);
    Ok(set_fields([
        ("metadata", object_meta(pod.metadata.unwrap_or_default())),
        ("spec", spec),
    ]))
}

pub(super) fn deployment(deployment: apps::Deployment) -> Result<Value> {
    let Some(mut spec) = deployment.spec else {
        return Ok(json!({"metadata": object_meta(deployment.metadata.unwrap_or_default())}));
    };
    let strategy = spec.strategy.take().map(|mut strategy| {
        let rolling = strategy.rolling_update.take().map_or(Value::Null, |rolling| {
            set_fields([
                (
                    "maxUnavailable",
                    rolling.max_unavailable.map_or(Value::Null, int_or_string),
                ),
                ("maxSurge", rolling.max_surge.map_or(Value::Null, int_or_string)),
            ])
        });
        set_fields([("type", json!(strategy.r#type)), ("rollingUpdate", rolling)])
    });
    let value = set_fields([
        ("replicas", json!(spec.replicas.take())),
        ("selector", spec.selector.take().map_or(Value::Null, label_selector)),
        ("template", template(spec.template.take())?),
        ("strategy", strategy.unwrap_or(Value::Null)),
        ("minReadySeconds", json!(spec.min_ready_seconds.take())),
        ("revisionHistoryLimit", json!(spec.revision_history_limit.take())),
        ("paused", json!(spec.paused.take())),
        ("progressDeadlineSeconds", json!(spec.progress_deadline_seconds.take())),
    ]);
    unread("a Deployment", &spec)?;
    Ok(set_fields([
        ("metadata", object_meta(deployment.metadata.unwrap_or_default())),
        ("spec", value),
    ]))
}

fn job_spec(mut spec: batch::JobSpec) -> Result<Value> {
    let value = set_fields([
        ("parallelism", json!(spec.parallelism.take())),
        ("completions", json!(spec.completions.take())),
        ("activeDeadlineSeconds", json!(spec.active_deadline_seconds.take())),
        ("backoffLimit", json!(spec.backoff_limit.take())),
        ("selector", spec.selector.take().map_or(Value::Null, label_selector)),
        ("manualSelector", json!(spec.manual_selector.take())),
        ("template", template(spec.template.take())?),
        ("ttlSecondsAfterFinished", json!(spec.ttl_seconds_after_finished.take())),
        ("completionMode", json!(spec.completion_mode.take())),
        ("suspend", json!(spec.suspend.take())),
    ]);
    unread("a Job", &spec)?;
    Ok(value)
}

pub(super) fn job(job: batch::Job) -> Result<Value> {
    let spec = job.spec.map(job_spec).transpose()?.unwrap_or(Value::Null);
    Ok(set_fields([
        ("metadata", object_meta(job.metadata.unwrap_or_default())),
        ("spec", spec),
    ]))
}

pub(super) fn cron_job(cron_job: batch::CronJob) -> Result<Value> {
    let Some(mut spec) = cron_job.spec else {
        return Ok(json!({"metadata": object_meta(cron_job.metadata.unwrap_or_default())}));
    };
    let job_template = match spec.job_template.take() {
        Some(job_template) => set_fields([
            ("metadata", object_meta(job_template.metadata.unwrap_or_default())),
            (
                "spec",
                job_template.spec.map(job_spec).transpose()?.unwrap_or(Value::Null),
            ),
        ]),
        None => Value::Null,
    };
    let value = set_fields([
        ("schedule", json!(spec.schedule.take())),
        ("timeZone", json!(spec.time_zone.take())),
        ("startingDeadlineSeconds", json!(spec.starting_deadline_seconds.take())),
        ("concurrencyPolicy", json!(spec.concurrency_policy.take())),
        ("suspend", json!(spec.suspend.take())),
        ("jobTemplate", job_template),
        (
            "successfulJobsHistoryLimit",
            json!(spec.successful_jobs_history_limit.take()),
        ),
        ("failedJobsHistoryLimit", json!(spec.failed_jobs_history_limit.take())),
    ]);
    unread("a CronJob", &spec)?;
    Ok(set_fields([
        ("metadata", object_meta(cron_job.metadata.unwrap_or_default())),
        ("spec", value),
    ]))
}

pub(super) fn service(service: core::Service) -> Result<Value> {
    let Some(mut spec) = service.spec else {
        return Ok(json!({"metadata": object_meta(service.metadata.unwrap_or_default())}));
    };
    let ports: Vec<Value> = std::mem::take(&mut spec.ports)
        .into_iter()
        .map(|port| {
            set_fields([
                ("name", json!(port.name)),
                ("protocol", json!(port.protocol)),
                ("appProtocol", json!(port.app_protocol)),
                ("port", json!(port.port)),
                ("targetPort", port.target_port.map_or(Value::Null, int_or_string)),
                ("nodePort", json!(port.node_port.filter(|port| *port != 0))),
            ])
        })
        .collect();
    let value = set_fields([
        ("ports", json!(ports)),
        ("selector", json!(std::mem::take(&mut spec.selector))),
        ("clusterIP", json!(spec.cluster_ip.take())),
        ("clusterIPs", json!(std::mem::take(&mut spec.cluster_ips))),
        ("type", json!(spec.r#type.take())),
        ("externalIPs", json!(std::mem::take(&mut spec.external_ips))),
        ("sessionAffinity", json!(spec.session_affinity.take())),
        ("externalName", json!(spec.external_name.take())),
        ("externalTrafficPolicy", json!(spec.external_traffic_policy.take())),
        ("ipFamilies", json!(std::mem::take(&mut spec.ip_families))),
        ("ipFamilyPolicy", json!(spec.ip_family_policy.take())),
        ("internalTrafficPolicy", json!(spec.internal_traffic_policy.take())),
    ]);
    unread("a Service", &spec)?;
    Ok(set_fields([
        ("metadata", object_meta(service.metadata.unwrap_or_default())),
        ("spec", value),
    ]))
}
