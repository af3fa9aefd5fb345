"""Thin click layers: parse, call one library function, render."""
