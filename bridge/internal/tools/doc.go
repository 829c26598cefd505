// Package tools holds the commands that build, test and measure the
// project (make's helpers), apart from the product's packages.
package tools
