//! Tests of the threshold file: each line type, each refusal, and how lines apply.

use super::*;
use crate::classify::Classes;
use std::collections::BTreeMap;
