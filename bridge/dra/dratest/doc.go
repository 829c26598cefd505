// Package dratest has fakes of the seams of package dra: Devices, which
// records the claims it is asked to prepare and unprepare, and
// Publisher, which keeps what it is given to publish and the last
// health report.
package dratest
