//! Fuzzing Kubernetes quantities (`parse_quantity`, `quantity_to_bytes`): arbitrary text and
//! text built from the grammar's pieces. Every input is answered (no panic), a refusal names
//! the input, `Syntax` exactly when the text is outside the grammar, `TooLarge` only for values
//! that really exceed 2^63-1, and accepted values agree with a floating-point reading.

use proptest::prelude::*;
use quorate_api::quantity::{QuantityError, parse_quantity, quantity_to_bytes};

const SUFFIXES: [&str; 16] = [
    "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
];

/// `[+-]? (digits (. digits?)? | . digits) suffix`, the grammar `parse_quantity` accepts.
fn in_grammar(input: &str) -> bool {
    let s = input.strip_prefix(['+', '-']).unwrap_or(input);
    let int_len = s.bytes().take_while(u8::is_ascii_digit).count();
    let (int, rest) = s.split_at(int_len);
    let (frac, suffix) = match rest.strip_prefix('.') {
        Some(after) => {
            let n = after.bytes().take_while(u8::is_ascii_digit).count();
            after.split_at(n)
        }
        None => ("", rest),
    };
    if int.is_empty() && frac.is_empty() {
        return false;
    }
    if SUFFIXES.contains(&suffix) {
        return true;
    }
    let Some(exp) = suffix.strip_prefix(['e', 'E']) else {
        return false;
    };
    let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// The value of an in-grammar quantity as a float (infinite when huge, 0 when tiny).
fn approximate(input: &str) -> f64 {
    let negative = input.starts_with('-');
    let s = input.strip_prefix(['+', '-']).unwrap_or(input);
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(end);
    let number = if number.contains('.') {
        format!("0{number}0")
    } else {
        format!("0{number}")
    };
    let (scale_exp, binary) = match suffix {
        "" => (0i64, 0u32),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        e => {
            let digits = &e[1..];
            let (neg, digits) = match digits.strip_prefix('-') {
                Some(d) => (true, d),
                None => (false, digits.trim_start_matches('+')),
            };
            let v: i64 = digits.parse().unwrap_or(100_000).min(100_000);
            (if neg { -v } else { v }, 0)
        }
    };
    let value: f64 = format!("{number}e{scale_exp}").parse().unwrap();
    let value = value * 2f64.powi(binary as i32);
    if negative { -value } else { value }
}

/// What every refusal must look like: a message that quotes the input.
fn check_error(input: &str, e: &QuantityError) {
    let text = e.to_string();
    assert!(!text.is_empty(), "{input:?}: empty message");
    assert!(
        text.contains(&format!("{input:?}")),
        "{input:?}: the message does not name the input: {text}"
    );
}

const MAX: f64 = 9_223_372_036_854_775_807.0;

fn check(input: &str) {
    let parsed = parse_quantity(input);
    match &parsed {
        Err(e @ QuantityError::Syntax { .. }) => {
            check_error(input, e);
            assert!(!in_grammar(input), "{input:?} is a quantity, yet: {e}");
        }
        Err(e @ QuantityError::TooLarge { .. }) => {
            check_error(input, e);
            assert!(in_grammar(input), "{input:?}: {e}");
            let v = approximate(input).abs();
            assert!(
                v >= MAX * (1.0 - 1e-9),
                "{input:?} (about {v}) is refused as too large: {e}"
            );
        }
        Err(e @ QuantityError::Negative { .. }) => panic!("{input:?}: parse says {e}"),
        Ok(q) => {
            assert!(in_grammar(input), "{input:?} parsed as {q:?}");
            let v = approximate(input);
            assert!(
                v.abs() <= MAX * (1.0 + 1e-9),
                "{input:?} = {v} was accepted"
            );
            let millis = q.millis() as f64;
            let wanted = v * 1000.0;
            // Rounded up to a thousandth, so up to one off, plus float error.
            let slack = 1.0 + wanted.abs() * 1e-9;
            assert!(
                (millis - wanted).abs() <= slack
                    || (v != 0.0 && wanted.abs() < 1.0 && millis.abs() == 1.0),
                "{input:?}: {millis} thousandths, about {wanted} expected"
            );
        }
    }
    match quantity_to_bytes(input) {
        Ok(bytes) => {
            let q = parsed.expect("bytes of an unparsable quantity");
            assert!(q.millis() >= 0);
            assert_eq!(i128::from(bytes), q.ceil_units(), "{input:?}");
        }
        Err(e) => {
            check_error(input, &e);
            match (&e, &parsed) {
                (QuantityError::Negative { .. }, Ok(q)) => assert!(q.millis() < 0, "{input:?}"),
                (QuantityError::TooLarge { .. }, Ok(q)) => {
                    assert!(q.ceil_units() > i128::from(u64::MAX), "{input:?}")
                }
                (_, Err(p)) => assert_eq!(&e, p, "{input:?}"),
                (other, Ok(q)) => panic!("{input:?} = {q:?} refused as bytes: {other}"),
            }
        }
    }
}

/// Text built from the grammar's pieces, with some junk thrown in.
fn quantity_like() -> impl Strategy<Value = String> {
    let sign = prop_oneof![Just(""), Just("+"), Just("-"), Just("--"), Just("±")];
    let int = prop_oneof![
        "[0-9]{0,3}",
        "[0-9]{15,25}",
        "0{0,50}[1-9]?",
        "[0-9]{30,45}"
    ];
    let frac = prop_oneof![
        Just(String::new()),
        Just(".".to_string()),
        "\\.[0-9]{1,4}",
        "\\.0{20,50}[0-9]{0,3}",
        "\\.[0-9]{30,50}",
    ];
    let suffix = prop_oneof![
        proptest::sample::select(SUFFIXES.to_vec()).prop_map(str::to_string),
        "[eE][+-]?[0-9]{1,4}",
        "[eE][+-]?[0-9]{18,25}",
        "[eE][+-]?",
        "(ki|KI|Gb|GB|e\\+-1|iB| Gi|Gi |µ|\u{0660}|\u{ff11})",
        ".{0,3}",
    ];
    (sign, int, frac, suffix).prop_map(|(s, i, f, x)| format!("{s}{i}{f}{x}"))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_text_is_answered_clearly(input in any::<String>()) {
        check(&input);
    }

    #[test]
    fn quantity_like_text_is_parsed_exactly_or_refused_for_what_it_is(input in quantity_like()) {
        check(&input);
    }
}

#[test]
fn edge_cases() {
    for input in [
        "9223372036854775807",
        "9223372036854775808",
        "-9223372036854775807",
        "-9223372036854775808",
        "8Ei",
        "7.99999999999Ei",
        "18446744073709551615",
        "1e18",
        "9.3e18",
        "1e-1000",
        "1e1000",
        "1e99999999999999999999",
        "1e-99999999999999999999",
        "0e99999999999999999999",
        "0.000000000000000000000000000000000000000000001Ki",
        "1.0000000000000000000000000000000000000000000000Ki",
        "1.000000000000000000000000000000000000000000",
        "000000000000000000000000000000000000000000000000001",
        ".0",
        "0.",
        "-0",
    ] {
        check(input);
    }
}

/// Found by fuzzing: a quantity with many digits after the point was refused as "too large"
/// (the digits overflowed the arithmetic, not the value the limit).
#[test]
fn quantity_with_many_fraction_digits_is_read_exactly_not_refused_as_too_large() {
    assert_eq!(
        quantity_to_bytes("1.00000000000000000000Ei"),
        Ok(1 << 60),
        "1 EiB written with 20 zeros"
    );
    assert_eq!(
        quantity_to_bytes("4.0000000000000000000000007Ei"),
        Ok((4 << 60) + 1),
        "a tiny fraction of a byte rounds up"
    );
    assert_eq!(
        quantity_to_bytes("0.000000000000000000000000000000000000000000001Ki"),
        Ok(1)
    );
    assert_eq!(
        parse_quantity("1.0000000000000000000000000000000000000000")
            .unwrap()
            .millis(),
        1000
    );
    assert_eq!(
        parse_quantity("0.1234567890123456789012345678901234567890")
            .unwrap()
            .millis(),
        124
    );
    assert_eq!(
        parse_quantity(&format!("0.{}1234e45", "0".repeat(42)))
            .unwrap()
            .millis(),
        123_400
    );
    // Really too large stays refused.
    assert!(matches!(
        quantity_to_bytes("8.00000000000000000000Ei"),
        Err(QuantityError::TooLarge { .. })
    ));
}
