//! Kubernetes quantities (`8Gi`, `100Mi`, `500M`, `1e3`, `250m`, `1.5`) turned into exact
//! numbers, for the quota, storage capacity and delta-snapshot memory limit.
//!
//! Values are held in thousandths (milli-units), as Kubernetes does; finer precision is
//! rounded up, like Kubernetes rounds `0.1m` up to `1m`.

/// Why a text is not a usable quantity.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not follow the Kubernetes quantity syntax.
    #[error(
        "{input:?} is not a quantity; use a Kubernetes quantity such as \"8Gi\", \"100Mi\", \"500M\" or \"1e9\""
    )]
    Syntax {
        /// The rejected text.
        input: String,
    },
    /// The value exceeds 2^63-1, the largest quantity Kubernetes represents.
    #[error("{input:?} is too large; quantities may not exceed 2^63-1 (about \"8Ei\")")]
    TooLarge {
        /// The rejected text.
        input: String,
    },
    /// A size was negative.
    #[error("{input:?} is negative; a size must be zero or more")]
    Negative {
        /// The rejected text.
        input: String,
    },
}

/// A parsed quantity, exact to a thousandth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ParsedQuantity {
    millis: i128,
}

impl ParsedQuantity {
    /// The value in thousandths (`250m` is 250, `1` is 1000).
    pub fn millis(self) -> i128 {
        self.millis
    }

    /// The value rounded up to a whole unit (bytes for sizes, cores for CPU).
    pub fn ceil_units(self) -> i128 {
        self.millis.div_euclid(1000) + i128::from(self.millis.rem_euclid(1000) != 0)
    }
}

/// The largest magnitude Kubernetes accepts, in thousandths.
const MAX_MILLIS: u128 = (i64::MAX as u128) * 1000;

/// Parses any Kubernetes quantity (sizes, CPU, counts).
pub fn parse_quantity(input: &str) -> Result<ParsedQuantity, QuantityError> {
    let syntax = || QuantityError::Syntax {
        input: input.to_string(),
    };
    let too_large = || QuantityError::TooLarge {
        input: input.to_string(),
    };

    let (negative, unsigned) = match input.as_bytes().first() {
        Some(b'-') => (true, &input[1..]),
        Some(b'+') => (false, &input[1..]),
        _ => (false, input),
    };
    let int_len = unsigned.bytes().take_while(u8::is_ascii_digit).count();
    let (int_digits, after_int) = unsigned.split_at(int_len);
    let (frac_digits, suffix) = match after_int.strip_prefix('.') {
        Some(after_dot) => {
            let frac_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            after_dot.split_at(frac_len)
        }
        None => ("", after_int),
    };
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err(syntax());
    }
    let multiplier = parse_suffix(suffix).ok_or_else(syntax)?;

    // Exact at any length: trailing zeros of the fraction change nothing, and the value is
    // only ever needed to a thousandth, rounded up.
    let frac_digits = frac_digits.trim_end_matches('0');
    let millis: u128 = match multiplier {
        Multiplier::Decimal(exp) => {
            // A power of ten moves the decimal point: the thousandths are the digits up to the
            // point `exp + 3` places right of where it is, plus one if any non-zero digit is left.
            let digits = format!("{int_digits}{frac_digits}");
            let point = int_digits.len() as i64 + exp + 3;
            let split = usize::try_from(point.clamp(0, digits.len() as i64)).unwrap_or(0);
            let (whole, rest) = digits.split_at(split);
            let zeros = u32::try_from((point - split as i64).max(0)).map_err(|_| too_large())?;
            let inexact = u128::from(rest.bytes().any(|b| b != b'0'));
            let whole = whole.trim_start_matches('0');
            if whole.is_empty() {
                inexact
            } else {
                if whole.len() > 38 {
                    return Err(too_large());
                }
                let whole: u128 = whole.parse().map_err(|_| syntax())?;
                10u128
                    .checked_pow(zeros)
                    .and_then(|f| whole.checked_mul(f))
                    .and_then(|v| v.checked_add(inexact))
                    .ok_or_else(too_large)?
            }
        }
        Multiplier::Binary(pow2) => {
            // Whole part times the scale, plus the fraction times the scale computed digit by
            // digit from the last (each step below 10 * scale), rounded up.
            let scale = 1000u128 << pow2;
            let whole = int_digits.trim_start_matches('0');
            if whole.len() > 38 {
                return Err(too_large());
            }
            let whole: u128 = if whole.is_empty() {
                0
            } else {
                whole.parse().map_err(|_| syntax())?
            };
            let mut fraction = 0u128;
            let mut inexact = false;
            for digit in frac_digits.bytes().rev() {
                let n = u128::from(digit - b'0') * scale + fraction;
                inexact |= !n.is_multiple_of(10);
                fraction = n / 10;
            }
            whole
                .checked_mul(scale)
                .and_then(|v| v.checked_add(fraction + u128::from(inexact)))
                .ok_or_else(too_large)?
        }
    };
    if millis > MAX_MILLIS {
        return Err(too_large());
    }
    let millis = millis as i128;
    Ok(ParsedQuantity {
        millis: if negative { -millis } else { millis },
    })
}

/// Parses a size (`8Gi`, `100Mi`, `500M`, `1e3`, `1024`) into bytes, rounding fractions up.
pub fn quantity_to_bytes(input: &str) -> Result<u64, QuantityError> {
    let parsed = parse_quantity(input)?;
    if parsed.millis() < 0 {
        return Err(QuantityError::Negative {
            input: input.to_string(),
        });
    }
    u64::try_from(parsed.ceil_units()).map_err(|_| QuantityError::TooLarge {
        input: input.to_string(),
    })
}

enum Multiplier {
    /// Times 10^n.
    Decimal(i64),
    /// Times 2^n.
    Binary(u32),
}

fn parse_suffix(suffix: &str) -> Option<Multiplier> {
    let m = match suffix {
        "" => Multiplier::Decimal(0),
        "n" => Multiplier::Decimal(-9),
        "u" => Multiplier::Decimal(-6),
        "m" => Multiplier::Decimal(-3),
        "k" => Multiplier::Decimal(3),
        "M" => Multiplier::Decimal(6),
        "G" => Multiplier::Decimal(9),
        "T" => Multiplier::Decimal(12),
        "P" => Multiplier::Decimal(15),
        "E" => Multiplier::Decimal(18),
        "Ki" => Multiplier::Binary(10),
        "Mi" => Multiplier::Binary(20),
        "Gi" => Multiplier::Binary(30),
        "Ti" => Multiplier::Binary(40),
        "Pi" => Multiplier::Binary(50),
        "Ei" => Multiplier::Binary(60),
        _ => {
            let exp = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))?;
            let (neg, digits) = match exp.as_bytes().first() {
                Some(b'-') => (true, &exp[1..]),
                Some(b'+') => (false, &exp[1..]),
                _ => (false, exp),
            };
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Anything beyond a few hundred overflows or rounds anyway; clamp to stay in i64.
            let value: i64 = digits.parse().unwrap_or(1_000);
            let value = value.min(1_000);
            Multiplier::Decimal(if neg { -value } else { value })
        }
    };
    Some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_to_bytes() {
        assert_eq!(quantity_to_bytes("8Gi"), Ok(8 * 1024 * 1024 * 1024));
        assert_eq!(quantity_to_bytes("16Gi"), Ok(16 * 1024 * 1024 * 1024));
        assert_eq!(quantity_to_bytes("100Mi"), Ok(100 * 1024 * 1024));
        assert_eq!(quantity_to_bytes("1Ki"), Ok(1024));
        assert_eq!(quantity_to_bytes("500M"), Ok(500_000_000));
        assert_eq!(quantity_to_bytes("2k"), Ok(2000));
        assert_eq!(quantity_to_bytes("1e3"), Ok(1000));
        assert_eq!(quantity_to_bytes("1E3"), Ok(1000));
        assert_eq!(quantity_to_bytes("5e+2"), Ok(500));
        assert_eq!(quantity_to_bytes("1024"), Ok(1024));
        assert_eq!(quantity_to_bytes("+1024"), Ok(1024));
        assert_eq!(quantity_to_bytes("0"), Ok(0));
        assert_eq!(quantity_to_bytes("1.5Gi"), Ok(1_610_612_736));
        assert_eq!(quantity_to_bytes("1E"), Ok(1_000_000_000_000_000_000));
        assert_eq!(quantity_to_bytes("8589934592"), Ok(8_589_934_592));
    }

    #[test]
    fn fractions_round_up() {
        assert_eq!(quantity_to_bytes("0.5"), Ok(1));
        assert_eq!(quantity_to_bytes("500m"), Ok(1));
        assert_eq!(quantity_to_bytes("1.1"), Ok(2));
        assert_eq!(quantity_to_bytes("1e-2"), Ok(1));
        assert_eq!(quantity_to_bytes(".5Ki"), Ok(512));
        assert_eq!(quantity_to_bytes("1."), Ok(1));
        assert_eq!(parse_quantity("0.1m").unwrap().millis(), 1);
        assert_eq!(parse_quantity("1e-400").unwrap().millis(), 1);
    }

    #[test]
    fn cpu_style_values() {
        assert_eq!(parse_quantity("50m").unwrap().millis(), 50);
        assert_eq!(parse_quantity("1.5").unwrap().millis(), 1500);
        assert_eq!(parse_quantity("2").unwrap().ceil_units(), 2);
        assert_eq!(parse_quantity("-250m").unwrap().millis(), -250);
        assert_eq!(parse_quantity("-250m").unwrap().ceil_units(), 0);
    }

    #[test]
    fn rejects_bad_syntax() {
        for bad in [
            "", "Gi", "8GB", "8gi", "8 Gi", " 8Gi", "1.2.3", "e3", "1e", "1e+", "1ee3", "--1",
            "8Gi8", "0x10", ".", "-", "1ki",
        ] {
            assert_eq!(
                parse_quantity(bad),
                Err(QuantityError::Syntax {
                    input: bad.to_string()
                }),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn rejects_negative_sizes_and_overflow() {
        assert_eq!(
            quantity_to_bytes("-1Gi"),
            Err(QuantityError::Negative {
                input: "-1Gi".into()
            })
        );
        assert!(matches!(
            quantity_to_bytes("9Ei"),
            Err(QuantityError::TooLarge { .. })
        ));
        assert!(matches!(
            quantity_to_bytes("1e400"),
            Err(QuantityError::TooLarge { .. })
        ));
        assert!(quantity_to_bytes("7Ei").is_ok());
    }

    #[test]
    fn error_message_names_the_value_and_the_syntax() {
        assert_eq!(
            quantity_to_bytes("8GB").unwrap_err().to_string(),
            "\"8GB\" is not a quantity; use a Kubernetes quantity such as \"8Gi\", \"100Mi\", \"500M\" or \"1e9\""
        );
    }
}
