//! `kubectl quorate get etcd [NAME…]`: druid's printer columns (the CRD's own), or the objects.

use crate::output::{self, OutputFormat, Printed};
use crate::{Io, KubectlError, Target};
use quorate_api::printer::{format_columns, rows};

/// Prints the named Etcds, or those of the namespace / `-l` / `-A`.
pub async fn get(
    target: &Target,
    names: &[String],
    format: Option<&OutputFormat>,
    io: &mut Io<'_>,
) -> Result<(), KubectlError> {
    let items = target.selected(names, false).await?;
    let printed = Printed {
        items: items
            .iter()
            .map(output::etcd_value)
            .collect::<Result<_, _>>()?,
        names: items
            .iter()
            .map(|e| output::etcd_name(e.metadata.name.as_deref().unwrap_or_default()))
            .collect(),
        single: names.len() == 1,
    };
    if output::print(io.out, format, &printed)? {
        return Ok(());
    }
    if items.is_empty() {
        let scope = if target.all_namespaces {
            String::new()
        } else {
            format!(" in {} namespace", target.namespace)
        };
        writeln!(io.err, "No resources found{scope}.")?;
        return Ok(());
    }
    let wide = format == Some(&OutputFormat::Wide);
    let mut table = rows(&items, wide, jiff::Timestamp::now());
    if target.all_namespaces {
        for (i, row) in table.iter_mut().enumerate() {
            let namespace = match i {
                0 => "NAMESPACE".to_string(),
                _ => items[i - 1].metadata.namespace.clone().unwrap_or_default(),
            };
            row.insert(0, namespace);
        }
    }
    write!(io.out, "{}", format_columns(&table))?;
    Ok(())
}
